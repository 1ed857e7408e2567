"""A stand-in for HTCondor's negotiator: put each job on the free slot it ranks best, with HTCondor's own code.

Why a stand-in: HTCondor's daemons (schedd, negotiator, startd) are not
installable on these machines; only the ``htcondor`` wheel is, whose
``classad2`` module is HTCondor's own ClassAd parser and evaluator.  This
dispatcher does what the negotiator does for one idle job at a time: among
the free slots whose ad matches the job's ``Requirements``, take the one with
the highest ``NEGOTIATOR_PRE_JOB_RANK`` (evaluated with MY = slot, TARGET =
job; the expression HTDA ships in ``config/htcondor/``, else HTCondor's
default), then the highest job ``Rank`` (MY = job, TARGET = slot).  Left
out: fair share between users, claim reuse, preemption.  Remaining ties go
to the worker with the fewest busy slots (the negotiator's order among equal
slots is unspecified; spreading keeps the three runs comparable).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import classad2

__all__ = ["Slot", "Negotiator", "DEFAULT_PRE_JOB_RANK", "shipped_pre_job_rank", "machine_ad"]

#: HTCondor's default (condor_negotiator, 25.x)
DEFAULT_PRE_JOB_RANK = ("(10000000 * My.Rank) + (1000000 * (RemoteOwner =?= UNDEFINED)) - (100000 * Cpus) "
                        "- Memory")
SHIPPED = Path(__file__).resolve().parents[2] / "config" / "htcondor" / "50-htda-negotiator.config"


def shipped_pre_job_rank(path: Path = SHIPPED) -> str | None:
    """The ``NEGOTIATOR_PRE_JOB_RANK`` of HTDA's pool snippet, or None where there is none."""
    try:
        text = path.read_text()
    except OSError:
        return None
    match = re.search(r"^NEGOTIATOR_PRE_JOB_RANK\s*=\s*(.+)$", text, re.MULTILINE)
    return match.group(1).strip() if match else None


def machine_ad(worker: str, slot: int, cpus: int = 1, memory: int = 2048) -> classad2.ClassAd:
    """A partitionable-free static slot of a worker, with the HTDA node name its startd cron publishes."""
    return classad2.ClassAd({
        "MyType": "Machine", "Name": f"slot{slot}@{worker}.htda-bench", "Machine": f"{worker}.htda-bench",
        "HTDA_NodeName": worker, "Arch": "X86_64", "OpSys": "LINUX", "Cpus": cpus, "Memory": memory,
        "State": "Unclaimed", "Activity": "Idle", "Rank": 0.0,
    })


@dataclass
class Slot:
    """One execute slot: its worker, number, machine ad, and the job on it (None: free)."""

    worker: str
    number: int
    ad: classad2.ClassAd
    job: str | None = None


def _number(value) -> float:
    """A ClassAd result as a float; undefined, error and non-numbers count as 0 (the negotiator's cast)."""
    if isinstance(value, classad2.Value) or isinstance(value, str):
        return 0.0
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    return float(value) if isinstance(value, (int, float)) else 0.0


class Negotiator:
    """Matches idle jobs to free slots (see the module docstring)."""

    def __init__(self, workers: list[str], slots_per_worker: int, pre_job_rank: str | None = None):
        self.pre_job_rank_text = pre_job_rank or DEFAULT_PRE_JOB_RANK
        self.pre_job_rank = classad2.ExprTree(self.pre_job_rank_text)
        self.slots = [Slot(w, n, machine_ad(w, n)) for w in workers for n in range(1, slots_per_worker + 1)]
        self.order = {w: i for i, w in enumerate(workers)}

    def free(self) -> list[Slot]:
        return [s for s in self.slots if s.job is None]

    def busy_on(self, worker: str) -> int:
        return sum(1 for s in self.slots if s.worker == worker and s.job is not None)

    def matches(self, job: classad2.ClassAd, slot: Slot) -> bool:
        requirements = job.lookup("Requirements") if "Requirements" in job else None
        if requirements is None:
            return True
        return requirements.eval(scope=job, target=slot.ad) is True

    def score(self, job: classad2.ClassAd, slot: Slot) -> tuple[float, float]:
        """(pre-job rank, job rank) of a slot for a job."""
        pre = _number(self.pre_job_rank.eval(scope=slot.ad, target=job))
        rank = _number(job.lookup("Rank").eval(scope=job, target=slot.ad)) if "Rank" in job else 0.0
        return pre, rank

    def place(self, job_id: str, job: classad2.ClassAd) -> Slot | None:
        """Claim the best free matching slot for the job; None if no free slot matches."""
        candidates = [s for s in self.free() if self.matches(job, s)]
        if not candidates:
            return None
        best = max(candidates, key=lambda s: (*self.score(job, s), -self.busy_on(s.worker),
                                              -self.order[s.worker], -s.number))
        best.job = job_id
        return best

    def release(self, slot: Slot) -> None:
        slot.job = None

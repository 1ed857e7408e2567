"""The analysts' jobs: file groups with a popularity skew, several passes, HTCondor job ads.

Files are grouped as analysts' datasets are (consecutive files of the
dataset form a group).  Each pass submits ``jobs_per_pass`` jobs; each job
picks a group with a Zipf-like weight (rank ``r`` weighs ``1 / r**skew``, the
rank order shuffled with the seed) and reads up to ``files_per_job`` of its
files.  The list is a pure function of its parameters, so the three runs
replay the same jobs in the same order.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from .dataset import DatasetFile

__all__ = ["Job", "WorkloadSpec", "make_jobs", "job_ad"]


@dataclass(frozen=True)
class WorkloadSpec:
    """How many passes and jobs, how jobs group files, how skewed popularity is."""

    passes: int = 4
    jobs_per_pass: int = 12
    files_per_job: int = 3
    skew: float = 1.0
    analysts: int = 3
    seed: int = 7

    def __post_init__(self) -> None:
        if self.passes < 1 or self.jobs_per_pass < 1 or self.files_per_job < 1 or self.analysts < 1:
            raise ValueError("passes, jobs_per_pass, files_per_job and analysts must be positive")
        if self.skew < 0:
            raise ValueError("skew must be >= 0 (0: every group equally popular)")


@dataclass(frozen=True)
class Job:
    """One analysis job: its id, pass, owner and input files (LFNs)."""

    job_id: str
    cluster: int
    pass_no: int
    owner: str
    inputs: tuple[str, ...]
    sizes: dict[str, int] = field(default_factory=dict, compare=False, hash=False)


def groups_of(files: list[DatasetFile], size: int) -> list[list[DatasetFile]]:
    """Consecutive files in groups of ``size`` (the last may be shorter)."""
    return [files[i:i + size] for i in range(0, len(files), size)]


def make_jobs(files: list[DatasetFile], spec: WorkloadSpec) -> list[Job]:
    """Every job of every pass, in submission order."""
    groups = groups_of(files, spec.files_per_job)
    rng = np.random.default_rng(spec.seed)
    order = rng.permutation(len(groups))  # which group is the most popular, second, ...
    weights = np.empty(len(groups))
    weights[order] = 1.0 / np.arange(1, len(groups) + 1) ** spec.skew
    weights /= weights.sum()
    sizes = {f.lfn: f.size for f in files}
    jobs = []
    for pass_no in range(1, spec.passes + 1):
        picks = rng.choice(len(groups), size=spec.jobs_per_pass, p=weights)
        for pick in picks:
            cluster = 1000 + len(jobs)
            owner = f"analyst{pick % spec.analysts + 1}"
            inputs = tuple(f.lfn for f in groups[pick])
            jobs.append(Job(f"submit.htda-bench#{cluster}.0", cluster, pass_no, owner, inputs,
                            {lfn: sizes[lfn] for lfn in inputs}))
    return jobs


def _q(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def job_ad(job: Job, qdate: float | None = None) -> str:
    """The job's ad in HTCondor's old format, as the job router hands it to the translate hook."""
    qdate = int(qdate if qdate is not None else time.time())
    attrs = {
        "MyType": _q("Job"), "TargetType": _q("Machine"),
        "ClusterId": str(job.cluster), "ProcId": "0", "GlobalJobId": _q(f"{job.job_id}#{qdate}"),
        "Owner": _q(job.owner), "User": _q(f"{job.owner}@htda-bench"), "QDate": str(qdate),
        "JobUniverse": "5", "JobStatus": "1", "RequestCpus": "1", "RequestMemory": "2000",
        "RequestDisk": "DiskUsage", "DiskUsage": "1000",
        "Requirements": "(TARGET.Arch == \"X86_64\") && (TARGET.OpSys == \"LINUX\") && "
                        "(TARGET.Memory >= RequestMemory) && (TARGET.Cpus >= RequestCpus)",
        "Rank": "0.0", "Cmd": _q("/usr/bin/python3"), "Iwd": _q(f"/home/{job.owner}"),
        "Arguments": _q(f"-m bench.cluster.analysis --job {job.job_id}"),
        "HTDA_InputFiles": _q(",".join(job.inputs)), "HTDA_Pass": str(job.pass_no),
    }
    return "".join(f"{k} = {v}\n" for k, v in sorted(attrs.items()))

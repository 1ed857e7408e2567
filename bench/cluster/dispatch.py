"""How a pass's jobs get to slots: real HTCondor, or the stand-in negotiator where HTCondor is missing.

``CondorDispatch``  a real pool (:mod:`bench.cluster.condor`): each job is
                    submitted with ``condor_submit`` as an ordinary account,
                    routed by the real job router with HTDA's hooks (HTDA run),
                    matched by the real negotiator, run by a startd's starter
                    in its worker's namespace;
``StandinDispatch`` the stand-in (:mod:`bench.cluster.negotiator`): the bench
                    runs the hooks itself, places each job with HTCondor's
                    ClassAd evaluator, and runs it in a long-lived slot runner.

Both return one record per job (the analysis result, the worker and slot,
the inputs' bytes and how many of them the worker's cache device held at the
start, the nodes the hook preferred).
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from htda.condor import classads
from tests.users import ensure_user

from .condor import BENCH_USER, CondorPool, CondorSetup
from .htda_pool import CACHE_PORT, HTDAPool
from .negotiator import Negotiator, Slot, shipped_pre_job_rank
from .progress import EVERY, PassProgress
from .topology import Host, Topology, TopologyError
from .workload import Job, job_ad

__all__ = ["CondorDispatch", "StandinDispatch", "SlotRunner", "REPO", "CONDOR_DIR"]

REPO = Path(__file__).resolve().parents[2]
#: a mode's HTCondor pool lives under this folder of the mode's run directory
CONDOR_DIR = "condor"


def _record(mode: str, job: Job, result: dict, worker: str, slot: int, cached: int, preferred: list[str]) -> dict:
    return {**result, "mode": mode, "pass": job.pass_no, "worker": worker, "slot": slot, "inputs": list(job.inputs),
            "input_bytes": sum(job.sizes.values()), "cached_bytes": cached, "preferred": preferred}


# -- real HTCondor ------------------------------------------------------------------------------------

class CondorDispatch:
    """A real HTCondor pool for one mode; jobs submitted per pass, waited for in the queue."""

    name = "condor"

    def __init__(self, home: Path, topo: Topology, mode: str, roots: dict[str, Path], pool: HTDAPool | None,
                 moddir: Path, slots: int, log: Callable[[str], None] = print, poll: float = 1.0,
                 wait_routed: bool = True):
        self.mode, self.log, self.poll = mode, log, poll
        setup = CondorSetup(roots={w: Path(str(r)) for w, r in roots.items()}, wait_routed=wait_routed)
        if pool is not None:
            setup = _htda_setup(setup, pool, topo, moddir)
        self.condor = CondorPool(home, topo, moddir / CONDOR_DIR, slots, ensure_user(BENCH_USER), setup)
        try:
            took = self.condor.start()
        except BaseException:
            self.condor.stop()
            raise
        self.placement = self.describe()
        self.log(f"{mode}: HTCondor pool up in {took:.1f}s ({self.placement['version']}, negotiation every "
                 f"{self.placement['negotiator_interval']} s)")

    def describe(self) -> dict[str, object]:
        """What placed the jobs: HTCondor's version and the negotiator's and router's intervals as configured."""
        def knob(name: str) -> str:
            return self.condor.tool("condor_config_val", name, check=False).stdout.strip()

        version = self.condor.tool("condor_version").stdout.split("$")[1].replace("CondorVersion:", "").strip()
        return {"negotiator": "condor", "version": f"HTCondor {version.split()[0]}",
                "negotiator_interval": knob("NEGOTIATOR_INTERVAL"), "cycle_delay": knob("NEGOTIATOR_CYCLE_DELAY"),
                "router_polling_period": knob("JOB_ROUTER_POLLING_PERIOD")}

    def pids(self) -> dict[str, int]:
        return self.condor.pids()

    def run_pass(self, batch: list[Job]) -> list[dict]:
        """Submit every job of the pass, wait until all have left the queue; their records."""
        clusters = {self.condor.submit(job.job_id, job.pass_no, list(job.inputs)): job for job in batch}
        waiting = set(clusters)
        progress = PassProgress(_label(self.mode, batch), len(batch), self.log)
        while waiting:
            time.sleep(self.poll)
            queued = self.condor.queue()
            held = {c: reason for c, (status, reason) in queued.items() if c in waiting and status == 5}
            if held:
                raise TopologyError(f"{self.mode}: jobs held: {held}")
            waiting &= set(queued)
            progress.update(len(clusters) - len(waiting),
                            sum(status == 2 for c, (status, _) in queued.items() if c in waiting))  # 2: running
        records = []
        for cluster, job in clusters.items():
            result = self.condor.result(job.job_id)
            if "error" in result:
                raise TopologyError(f"{self.mode}: job {job.job_id} (cluster {cluster}) failed: {result['error']}")
            cached = sum(job.sizes[lfn] for lfn in result.pop("cached", []) if lfn in job.sizes)
            records.append(_record(self.mode, job, result, result["worker"], result["slot"], cached,
                                   result.get("preferred", [])))
        return records

    def stop(self) -> None:
        self.condor.stop()


def _label(mode: str, batch: list[Job]) -> str:
    return f"{mode}: pass {batch[0].pass_no}" if batch else mode


def _htda_setup(setup: CondorSetup, pool: HTDAPool, topo: Topology, moddir: Path) -> CondorSetup:
    """HTDA's part of the pool: the installed hooks, the router's settings (no log file: the hooks run as
    the job's owner, so problems go to the router's log), a settings file per worker for the startd cron."""
    pool.write_hooks_settings(log=None)
    cron = {}
    for w in topo.worker_hosts:
        path = moddir / f"hooks-{w.name}.toml"
        path.write_text(f'node = "http://127.0.0.1:{CACHE_PORT}"\ntimeout = 2.0\n')
        path.chmod(0o644)
        cron[w.name] = path
    caches = {w.name: moddir / w.name / "cache0" / "data" for w in topo.worker_hosts}
    return CondorSetup(setup.roots, caches, pool.hooks_dir, pool.hooks_config, cron, setup.wait_routed)


# -- the stand-in -------------------------------------------------------------------------------------

class SlotRunner:
    """Long-lived job runners, one per slot, in the slot's worker namespace (see analysis.serve)."""

    def __init__(self, hosts: dict[str, Host], slots: list[Slot], logdir: Path):
        self.results: queue.Queue = queue.Queue()
        self.procs: dict[tuple[str, int], subprocess.Popen] = {}
        env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
        for slot in slots:
            log = open(logdir / f"slot-{slot.worker}-{slot.number}.log", "ab")
            proc = subprocess.Popen(hosts[slot.worker].cmd(sys.executable, "-m", "bench.cluster.analysis", "--serve"),
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True, env=env,
                                    cwd=REPO, start_new_session=True)
            log.close()
            self.procs[(slot.worker, slot.number)] = proc
            threading.Thread(target=self._read, args=(slot, proc), daemon=True).start()

    def _read(self, slot: Slot, proc: subprocess.Popen) -> None:
        for line in proc.stdout:
            self.results.put((slot, json.loads(line)))
        self.results.put((slot, None))  # the runner died

    def submit(self, slot: Slot, job_id: str, paths: list[str]) -> None:
        proc = self.procs[(slot.worker, slot.number)]
        proc.stdin.write(json.dumps({"job": job_id, "paths": paths}) + "\n")
        proc.stdin.flush()

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.stdin.close()
        for proc in self.procs.values():
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()


class StandinDispatch:
    """The stand-in negotiator and slot runners; the bench runs the hooks as the job router would."""

    name = "standin"

    def __init__(self, topo: Topology, mode: str, roots: dict[str, Path], pool: HTDAPool | None, moddir: Path,
                 slots: int, cache_data: Callable[[str], Path], log: Callable[[str], None] = print):
        self.mode, self.roots, self.pool, self.cache_data, self.log = mode, roots, pool, cache_data, log
        self.negotiator = Negotiator([w.name for w in topo.worker_hosts], slots, shipped_pre_job_rank())
        self.runner = SlotRunner(topo.hosts, self.negotiator.slots, moddir)
        self.placement: dict[str, object] = {"negotiator": "standin"}

    def pids(self) -> dict[str, int]:
        return {}

    def run_pass(self, batch: list[Job]) -> list[dict]:
        pool = self.pool
        submitted = []
        for job in batch:  # submission: the router runs the translate hook on each idle job
            source = job_ad(job)
            routed = pool.translate(source) if pool else source
            submitted.append((job, source, routed, classads.parse_job(routed)))
        waiting, running, records = list(submitted), {}, []
        progress = PassProgress(_label(self.mode, batch), len(batch), self.log)
        while waiting or running:
            self._negotiate(waiting, running)
            slot, result = self._next_result(lambda: progress.update(len(records), len(running)))
            if result is None:
                raise TopologyError(f"the job runner of slot {slot.number} on {slot.worker} died "
                                    f"(log in the run directory)")
            job, source, routed, slot, cached, preferred = running.pop(result["job"])
            self.negotiator.release(slot)
            if pool:
                pool.finished(source, routed, slot.worker, slot.number)
            if "error" in result:
                raise TopologyError(f"{self.mode}: job {job.job_id} on {slot.worker} failed: {result['error']}")
            records.append(_record(self.mode, job, result, slot.worker, slot.number, cached, preferred))
            progress.update(len(records), len(running))
        return records

    def _next_result(self, waited: Callable[[], None], timeout: float = 3600.0) -> tuple[Slot, dict | None]:
        """The next finished job's slot and result; ``waited`` is called every few seconds until it comes."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self.runner.results.get(timeout=min(EVERY / 2, max(0.0, deadline - time.monotonic())))
            except queue.Empty:
                if time.monotonic() >= deadline:
                    raise TopologyError(f"{self.mode}: no job finished in {timeout:.0f} s") from None
                waited()

    def _negotiate(self, waiting: list, running: dict) -> None:
        """One negotiation cycle: every idle job, in order, gets the best free slot that matches."""
        for entry in list(waiting):
            if not self.negotiator.free():
                break
            job, source, routed, ad = entry
            slot = self.negotiator.place(job.job_id, ad)
            if slot is None:
                continue
            waiting.remove(entry)
            cached = self._cached_bytes(slot.worker, job)
            if self.pool:
                self.pool.started(routed, slot.worker, slot.number)
            running[job.job_id] = (job, source, routed, slot, cached, _preferred(ad))
            self.runner.submit(slot, job.job_id, [str(self.roots[slot.worker]) + lfn for lfn in job.inputs])

    def _cached_bytes(self, worker: str, job: Job) -> int:
        """Bytes of the job's inputs that the worker's cache device holds as the job starts (HTDA only)."""
        if self.mode != "htda":
            return 0
        data = self.cache_data(worker)
        return sum(job.sizes[lfn] for lfn in job.inputs if (data / lfn.lstrip("/")).exists())

    def stop(self) -> None:
        self.runner.stop()


def _preferred(ad) -> list[str]:
    value = classads.evaluate(ad, "HTDA_PreferredNodes", "")
    return [v for v in str(value).split(",") if v]

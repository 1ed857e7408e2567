"""One benchmark run: the cluster, the dataset on the storage, then each mode with the same jobs.

Modes (the same jobs in the same order each time):

``nocache``  every job reads its files from the storage host, through the
             worker's xrootdfs mount of the storage's XRootD server;
``htda``     HTDA's service node and cache nodes run; jobs are translated by
             the real hook, placed by their Rank, report start and end through
             the real hooks, and read through the worker's union view (cache
             device first, the xrootdfs storage mount after);
``xcache``   an XRootD proxy file cache (pfc) on the service host in front of
             the storage; jobs read through the worker's xrootdfs mount of it.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from htda.condor import classads

from .dataset import DatasetFile, DatasetSpec, ensure_dataset
from .htda_pool import HTDAPool
from .monitor import Monitor
from .negotiator import Negotiator, Slot, shipped_pre_job_rank
from .services import XCACHE_PORT, XROOTD_PORT, Daemon, mounts_under, unmount_all, xcache, xrootd_origin, xrootdfs_mount
from .topology import Host, Topology, TopologyError
from .workload import WorkloadSpec, job_ad, make_jobs

__all__ = ["RunConfig", "ModeResult", "run_benchmark", "MODES", "REPO"]

MODES = ("nocache", "htda", "xcache")
REPO = Path(__file__).resolve().parents[2]


@dataclass
class RunConfig:
    """Everything a run needs; the defaults finish in about ten minutes on this machine."""

    workdir: Path = Path("/var/tmp/htda-bench")
    dataset_dir: Path | None = None  # default: <workdir>/dataset (kept between runs)
    prefix: str = "htdab"
    workers: int = 4
    slots: int = 2
    storage_rate: str = "200mbit"
    service_rate: str = ""
    cache_mb: int = 1024
    xcache_ram: str = "1g"
    think: float = 10.0
    steer_requirements: bool = True  # HTDA's submit.steer_requirements: jobs wait for a node holding inputs
    native_hooks: bool = True  # the compiled job-router hooks (install-hooks --native), else the Python ones
    modes: tuple[str, ...] = MODES
    dataset: DatasetSpec = field(default_factory=DatasetSpec)
    workload: WorkloadSpec = field(default_factory=WorkloadSpec)

    def __post_init__(self) -> None:
        bad = [m for m in self.modes if m not in MODES]
        if bad or not self.modes:
            raise ValueError(f"modes must be some of {', '.join(MODES)}, not {bad or 'none'}")
        if self.slots < 1 or self.cache_mb < 1:
            raise ValueError("slots and cache_mb must be positive")
        self.dataset_dir = Path(self.dataset_dir or self.workdir / "dataset")


@dataclass
class ModeResult:
    """What one mode measured."""

    mode: str
    jobs: list[dict]
    link_samples: list[tuple[float, int, int]]
    link_bytes: int
    daemons: dict[str, dict[str, float]]
    started: float
    ended: float
    pass_times: dict[int, tuple[float, float]]


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


class Cluster:
    """The topology, the dataset and the storage server, shared by the modes of a run."""

    def __init__(self, config: RunConfig, log=print):
        self.config, self.log = config, log
        self.topo = Topology(prefix=config.prefix, workers=config.workers, storage_rate=config.storage_rate,
                             service_rate=config.service_rate)
        self.files: list[DatasetFile] = []
        self.origin: Daemon | None = None

    def __enter__(self) -> "Cluster":
        c = self.config
        self.files = ensure_dataset(c.dataset_dir, c.dataset, log=self.log)
        _world_readable(c.dataset_dir)
        self.rundir = c.workdir / "run"
        unmount_all(self.rundir)
        if mounts_under(self.rundir):  # never delete through a mount (a view reaches the storage)
            raise TopologyError(f"cannot unmount {', '.join(mounts_under(self.rundir))}: remove them by hand")
        shutil.rmtree(self.rundir, ignore_errors=True)
        self.rundir.mkdir(parents=True)
        self.topo.up()
        try:
            self.origin = xrootd_origin(self.topo.storage, c.dataset_dir, self.rundir)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        if self.origin is not None:
            self.origin.stop()
        unmount_all(self.rundir)
        self.topo.down()

    # -- one mode ------------------------------------------------------------------
    def run_mode(self, mode: str, jobs: list) -> ModeResult:
        moddir = self.rundir / mode
        moddir.mkdir()
        daemons: list[Daemon] = []
        pool: HTDAPool | None = None
        try:
            mounts = {w.name: moddir / w.name / "storage" for w in self.topo.worker_hosts}
            if mode == "xcache":
                daemons.append(xcache(self.topo.service, self.topo.storage, moddir / "xcache-data", moddir,
                                      ram=self.config.xcache_ram))
                mounts = {w.name: moddir / w.name / "xcache" for w in self.topo.worker_hosts}
            server, port = (self.topo.service, XCACHE_PORT) if mode == "xcache" else (self.topo.storage, XROOTD_PORT)
            for w in self.topo.worker_hosts:
                daemons.append(xrootdfs_mount(w, server, port, mounts[w.name], moddir / w.name / "xrootdfs.log"))
            roots = mounts
            if mode == "htda":
                mean = sum(f.size for f in self.files) // len(self.files)
                pool = HTDAPool(self.topo, moddir, mounts, self.config.cache_mb << 20, unknown_size=mean,
                                steer_requirements=self.config.steer_requirements,
                                native_hooks=self.config.native_hooks)
                pool.start()
                pool.wait_members()
                roots = {w.name: moddir / w.name / "view" for w in self.topo.worker_hosts}
            watched = {**(pool.pids() if pool else {}), **{d.name: d.pid for d in daemons}}
            return self._execute(mode, jobs, roots, pool, moddir, watched)
        finally:
            if pool is not None:
                pool.stop()
            for daemon in reversed(daemons):
                daemon.stop()
            unmount_all(moddir)

    def _execute(self, mode: str, jobs: list, roots: dict[str, Path], pool: HTDAPool | None, moddir: Path,
                 watched: dict[str, int]) -> ModeResult:
        c = self.config
        negotiator = Negotiator([w.name for w in self.topo.worker_hosts], c.slots, shipped_pre_job_rank())
        runner = SlotRunner(self.topo.hosts, negotiator.slots, moddir)
        monitor = Monitor(self.topo, self.topo.storage, watched).start()
        records: list[dict] = []
        pass_times: dict[int, tuple[float, float]] = {}
        started = time.time()
        try:
            for pass_no in sorted({j.pass_no for j in jobs}):
                t0 = time.time()
                batch = [j for j in jobs if j.pass_no == pass_no]
                records += self._run_pass(mode, batch, roots, pool, negotiator, runner)
                pass_times[pass_no] = (t0, time.time())
                self.log(f"{mode}: pass {pass_no} done in {time.time() - t0:.1f}s")
                if pass_no != jobs[-1].pass_no and c.think > 0:
                    time.sleep(c.think)
        finally:
            ended = time.time()
            monitor.stop()
            runner.stop()
        return ModeResult(mode, records, monitor.link_samples, monitor.link_bytes(), monitor.daemon_stats(),
                          started, ended, pass_times)

    def _run_pass(self, mode, batch, roots, pool, negotiator, runner) -> list[dict]:
        submitted = []
        for job in batch:  # submission: the router runs the translate hook on each idle job
            source = job_ad(job)
            routed = pool.translate(source) if pool else source
            submitted.append((job, source, routed, classads.parse_job(routed)))
        waiting, running, records = list(submitted), {}, []
        while waiting or running:
            for entry in list(waiting):  # a negotiation cycle: every idle job, in order, gets a slot if one matches
                if not negotiator.free():
                    break
                job, source, routed, ad = entry
                slot = negotiator.place(job.job_id, ad)
                if slot is None:
                    continue
                waiting.remove(entry)
                cached = self._cached_bytes(mode, slot.worker, job)
                if pool:
                    pool.started(routed, slot.worker, slot.number)
                running[job.job_id] = (job, source, routed, slot, cached, _preferred(ad))
                runner.submit(slot, job.job_id, [str(roots[slot.worker]) + lfn for lfn in job.inputs])
            slot, result = runner.results.get(timeout=3600)
            if result is None:
                raise TopologyError(f"the job runner of slot {slot.number} on {slot.worker} died "
                                    f"(log in the run directory)")
            job, source, routed, slot, cached, preferred = running.pop(result["job"])
            negotiator.release(slot)
            if pool:
                pool.finished(source, routed, slot.worker, slot.number)
            if "error" in result:
                raise TopologyError(f"{mode}: job {job.job_id} on {slot.worker} failed: {result['error']}")
            records.append({**result, "mode": mode, "pass": job.pass_no, "worker": slot.worker,
                            "slot": slot.number, "inputs": list(job.inputs), "input_bytes": sum(job.sizes.values()),
                            "cached_bytes": cached, "preferred": preferred})
        return records

    def _cached_bytes(self, mode: str, worker: str, job) -> int:
        """Bytes of the job's inputs that the worker's cache device holds as the job starts (HTDA only)."""
        if mode != "htda":
            return 0
        data = self.rundir / mode / worker / "cache0" / "data"
        return sum(job.sizes[lfn] for lfn in job.inputs if (data / lfn.lstrip("/")).exists())


def _preferred(ad) -> list[str]:
    value = classads.evaluate(ad, "HTDA_PreferredNodes", "")
    return [v for v in str(value).split(",") if v]


def _world_readable(directory: Path) -> None:
    """The xrootd user must read the dataset (and walk to it)."""
    for path in [directory, *directory.parents]:
        if path == Path("/"):
            break
        path.chmod(path.stat().st_mode | 0o005)
    for dirpath, dirnames, filenames in os.walk(directory):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            os.chmod(p, os.stat(p).st_mode | 0o005 if name in dirnames else os.stat(p).st_mode | 0o004)


def run_benchmark(config: RunConfig, log=print) -> dict:
    """Build the cluster, run every mode with the same jobs, and return all results (JSON-able)."""
    started = time.time()
    with Cluster(config, log) as cluster:
        jobs = make_jobs(cluster.files, config.workload)
        log(f"{len(cluster.files)} files, {sum(f.size for f in cluster.files) / 1e9:.2f} GB; {len(jobs)} jobs in "
            f"{config.workload.passes} passes; {config.workers} workers x {config.slots} slots")
        results = {}
        for mode in config.modes:
            log(f"== mode {mode}")
            results[mode] = asdict(cluster.run_mode(mode, jobs))
        shaping = cluster.topo.shaping(cluster.topo.storage)
    return {"config": _jsonable(asdict(config)), "files": [asdict(f) for f in cluster.files],
            "shaping": shaping, "modes": results, "started": started, "ended": time.time()}


def _jsonable(value):
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return str(value) if isinstance(value, Path) else value

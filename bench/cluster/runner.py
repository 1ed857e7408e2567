"""One benchmark run: the cluster, the dataset on the storage, then each mode with the same jobs.

Modes (the same jobs in the same order each time):

``nocache``  every job reads its files from the storage host, through the
             worker's xrootdfs mount of the storage's XRootD server;
``htda``     HTDA's service node and cache nodes run; jobs are translated by
             the real hook (run by HTCondor's job router, or by the bench with
             the stand-in), placed by the shipped pre-job rank and their Rank
             and Requirements, and read through the worker's union view (cache
             device first, the xrootdfs storage mount after).  With
             ``read_through`` (the deployment docs/cache.rst recommends) each
             worker reaches the storage through its own XRootD proxy file
             cache on its local disk: the jobs' first reads fill it, and the
             cache node copies through it, so a file a job on that worker has
             read crosses the storage link once;
``xcache``   an XRootD proxy file cache (pfc) on the service host in front of
             the storage; jobs read through the worker's xrootdfs mount of it;
``ideal``    the physical limit of this machine: before the mode starts,
             every worker gets its own copy of every input in a local
             directory (not timed); jobs read those copies, and nothing
             crosses a link.

Placement (:mod:`bench.cluster.dispatch`): a real HTCondor pool per mode
where HTCondor is found, else the stand-in negotiator.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tests.htcondor_home import program

from .dataset import DatasetFile, DatasetSpec, ensure_dataset
from .dispatch import CONDOR_DIR, CondorDispatch, StandinDispatch
from .htda_pool import HTDAPool
from .monitor import Monitor
from .report import link_rate
from .services import (
    PURGE_INTERVAL,
    XCACHE_PORT,
    XROOTD_PORT,
    Daemon,
    disk_bytes,
    mounts_under,
    unmount_all,
    xcache,
    xrootd_origin,
    xrootdfs_mount,
)
from .topology import Topology, TopologyError
from .workload import WorkloadSpec, make_jobs

__all__ = ["RunConfig", "ModeResult", "run_benchmark", "MODES", "REPO"]

MODES = ("nocache", "htda", "xcache", "ideal")
#: union views the HTDA run can use (overlayfs needs plain lower directories, not the xrootdfs mounts)
VIEWS = ("mergerfs", "symlink")
REPO = Path(__file__).resolve().parents[2]


#: the coordinator's ``first_read_wait`` with read-through workers, as docs/cache.rst recommends (as long as
#: ``max_defer``: a job may wait that long in the queue before its first read says where its group belongs)
FIRST_READ_WAIT = 600.0


@dataclass
class RunConfig:
    """Everything a run needs; the defaults finish in about ten minutes on this machine."""

    workdir: Path = Path("/var/tmp/htda-bench")
    dataset_dir: Path | None = None  # default: <workdir>/dataset (kept between runs)
    prefix: str = "htdab"
    workers: int = 4
    slots: int = 2
    storage_rate: str = "200mbit"
    host_rate: str = "1gbit"
    cache_mb: int = 1024
    # XCache's own disk (MB); None: the same total as HTDA's cache devices (workers x cache_mb); 0: uncapped
    xcache_disk_mb: int | None = None
    # HTDA run: each worker's read-through proxy may keep this many MB of its own files (pfc's files limits, as
    # docs/cache.rst configures it: a small share beside the device); None: cache_mb / 8; 0: uncapped
    readthrough_mb: int | None = None
    xcache_ram: str = "1g"
    think: float = 10.0
    steer_requirements: bool = True  # HTDA's submit.steer_requirements: jobs wait for a node holding inputs
    read_through: bool = True  # HTDA run: each worker reads the storage through its own proxy file cache
    native_hooks: bool = True  # the compiled job-router hooks (install-hooks --native), else the Python ones
    view: str = "mergerfs"  # HTDA run: the cache nodes' union driver (VIEWS)
    coordinator_options: dict[str, Any] = field(default_factory=dict)  # HTDA run: more [coordinator] settings
    submit_options: dict[str, Any] = field(default_factory=dict)  # HTDA run: more [submit] settings
    modes: tuple[str, ...] = MODES
    negotiator: str = "standin"  # "condor": a real HTCondor pool places and runs the jobs; "standin": negotiator.py
    condor_home: Path | None = None  # HTCondor's release directory (negotiator = "condor")
    wait_routed: bool = True  # real HTCondor, HTDA run: jobs require HTDA_Routed (not matched before routing)
    dataset: DatasetSpec = field(default_factory=DatasetSpec)
    workload: WorkloadSpec = field(default_factory=WorkloadSpec)

    def __post_init__(self) -> None:
        bad = [m for m in self.modes if m not in MODES]
        if bad or not self.modes:
            raise ValueError(f"modes must be some of {', '.join(MODES)}, not {bad or 'none'}")
        if self.slots < 1 or self.cache_mb < 1:
            raise ValueError("slots and cache_mb must be positive")
        if self.xcache_disk_mb is None:
            self.xcache_disk_mb = self.workers * self.cache_mb
        if self.xcache_disk_mb < 0:
            raise ValueError("xcache_disk_mb must be >= 0 (0: uncapped)")
        if self.readthrough_mb is None:
            self.readthrough_mb = max(1, self.cache_mb // 8)
        if self.readthrough_mb < 0:
            raise ValueError("readthrough_mb must be >= 0 (0: uncapped)")
        self.dataset_dir = Path(self.dataset_dir or self.workdir / "dataset")
        if self.negotiator not in ("condor", "standin"):
            raise ValueError(f"negotiator must be condor or standin, not {self.negotiator!r}")
        if self.negotiator == "condor" and self.condor_home is None:
            raise ValueError("negotiator condor needs HTCondor's release directory (condor_home)")


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
    placement: dict = field(default_factory=dict)  # what placed the jobs: real HTCondor (version, intervals)
    open_counters: dict = field(default_factory=dict)  # HTDA run: worker -> {source: bytes its node counted}
    cache_disk: dict = field(default_factory=dict)  # cache area -> bytes it held on disk when the mode ended


class Cluster:
    """The topology, the dataset and the storage server, shared by the modes of a run."""

    def __init__(self, config: RunConfig, log=print):
        self.config, self.log = config, log
        self.topo = Topology(prefix=config.prefix, workers=config.workers, storage_rate=config.storage_rate,
                             host_rate=config.host_rate)
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
            if mode == "ideal":
                roots = {w.name: self._local_copies(moddir / w.name / "local") for w in self.topo.worker_hosts}
                return self._execute(mode, jobs, roots, None, moddir, {})
            mounts = {w.name: moddir / w.name / "storage" for w in self.topo.worker_hosts}
            if mode == "xcache":
                daemons.append(xcache(self.topo.service, self.topo.storage, moddir / "xcache-data", moddir,
                                      ram=self.config.xcache_ram, disk=self._xcache_disk(),
                                      headroom=int(PURGE_INTERVAL * link_rate(self.config.storage_rate))))
                mounts = {w.name: moddir / w.name / "xcache" for w in self.topo.worker_hosts}
            upstream = (self.topo.service, XCACHE_PORT) if mode == "xcache" else (self.topo.storage, XROOTD_PORT)
            servers = dict.fromkeys((w.name for w in self.topo.worker_hosts), upstream)
            if mode == "htda" and self.config.read_through:
                for w in self.topo.worker_hosts:
                    daemons.append(xcache(w, self.topo.storage, moddir / w.name / "readthrough-data", moddir / w.name,
                                          ram=self.config.xcache_ram, name=f"readthrough-{w.name}",
                                          files=(self.config.readthrough_mb or 0) << 20))
                    servers[w.name] = (w, XCACHE_PORT)
            for w in self.topo.worker_hosts:
                server, port = servers[w.name]
                daemons.append(xrootdfs_mount(w, server, port, mounts[w.name], moddir / w.name / "xrootdfs.log"))
            roots = mounts
            if mode == "htda":
                mean = sum(f.size for f in self.files) // len(self.files)
                sources = {name: f"root://{server.address}:{port}//" for name, (server, port) in servers.items()}
                pool = HTDAPool(self.topo, moddir, mounts, sources, self.config.cache_mb << 20, unknown_size=mean,
                                steer_requirements=self.config.steer_requirements,
                                native_hooks=self.config.native_hooks,
                                first_read_wait=FIRST_READ_WAIT if self.config.read_through else 0.0,
                                first_read_home=self.config.read_through, view=self.config.view,
                                read_through=self.config.read_through,
                                coordinator_options=self.config.coordinator_options,
                                submit_options={**self._schedd_tool_options(moddir), **self.config.submit_options})
                pool.start()
                pool.wait_members()
                roots = {w.name: moddir / w.name / "view" for w in self.topo.worker_hosts}
            watched = {**(pool.pids() if pool else {}), **{d.name: d.pid for d in daemons}}
            result = self._execute(mode, jobs, roots, pool, moddir, watched)
            result.cache_disk = self._cache_disk(moddir)
            return result
        finally:
            if pool is not None:
                pool.stop()
            for daemon in reversed(daemons):
                daemon.stop()
            unmount_all(moddir)

    def _schedd_tool_options(self, moddir: Path) -> dict[str, Any]:
        """The submit agent's HTCondor tools (the reschedule after routing, the queue read for homes), aimed at this
        run's schedd; none without real HTCondor.  Some tools are links to a program that acts on its argv[0], so
        each gets a link of its own name."""
        if self.config.negotiator != "condor":
            return {"reschedule_command": [], "queue_command": []}
        options: dict[str, Any] = {"condor_config": str(moddir / CONDOR_DIR / self.topo.service.name / "condor_config")}
        for key, name in (("reschedule_command", "condor_reschedule"), ("queue_command", "condor_q")):
            tool = moddir / "condor-tools" / name
            tool.parent.mkdir(parents=True, exist_ok=True)
            tool.unlink(missing_ok=True)
            tool.symlink_to(program(self.config.condor_home, name))
            options[key] = [str(tool)]
        return options

    def _xcache_disk(self) -> int:
        """XCache's cap in bytes; 0 (its data on the host's disk, as before caps) where the cap could never bind:
        the whole dataset fits in it."""
        cap = (self.config.xcache_disk_mb or 0) << 20
        return cap if cap < sum(f.size for f in self.files) else 0

    def _cache_disk(self, moddir: Path) -> dict[str, int]:
        """What each kind of cache area of the mode holds on disk now: XCache's data, HTDA's cache devices and
        the workers' read-through caches (each summed over the workers)."""
        workers = [moddir / w.name for w in self.topo.worker_hosts]
        areas = {"xcache": [moddir / "xcache-data"], "htda devices": [w / "cache0" for w in workers],
                 "read-through": [w / "readthrough-data" for w in workers]}
        return {area: sum(disk_bytes(p) for p in paths) for area, paths in areas.items()
                if any(p.exists() for p in paths)}

    def _local_copies(self, root: Path) -> Path:
        """A worker's own copy of the whole dataset under ``root`` (readable by every job owner)."""
        for f in self.files:
            target = root / f.lfn.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f.path, target)
            target.chmod(0o644)
        for directory in [root, *(p for p in root.rglob("*") if p.is_dir())]:
            directory.chmod(0o755)
        os.sync()  # written out before the mode starts, as a cache device filled ahead of time
        return root

    def _dispatch(self, mode: str, roots: dict[str, Path], pool: HTDAPool | None, moddir: Path):
        """Real HTCondor (``negotiator = "condor"``) or the stand-in places and runs this mode's jobs."""
        c = self.config
        if c.negotiator == "condor":
            return CondorDispatch(c.condor_home, self.topo, mode, roots, pool, moddir, c.slots, log=self.log,
                                  wait_routed=c.wait_routed)
        return StandinDispatch(self.topo, mode, roots, pool, moddir, c.slots,
                               lambda worker: self.rundir / mode / worker / "cache0" / "data", log=self.log)

    def _execute(self, mode: str, jobs: list, roots: dict[str, Path], pool: HTDAPool | None, moddir: Path,
                 watched: dict[str, int]) -> ModeResult:
        c = self.config
        dispatch = self._dispatch(mode, roots, pool, moddir)
        monitor = Monitor(self.topo, self.topo.storage, watched).start()
        records: list[dict] = []
        pass_times: dict[int, tuple[float, float]] = {}
        started = time.time()
        try:
            for pass_no in sorted({j.pass_no for j in jobs}):
                t0 = time.time()
                records += dispatch.run_pass([j for j in jobs if j.pass_no == pass_no])
                pass_times[pass_no] = (t0, time.time())
                self.log(f"{mode}: pass {pass_no} done in {time.time() - t0:.1f}s")
                if pass_no != jobs[-1].pass_no and c.think > 0:
                    time.sleep(c.think)
        finally:
            ended = time.time()
            monitor.stop()
            dispatch.stop()
        counters = pool.open_counters() if pool else {}
        return ModeResult(mode, records, monitor.link_samples, monitor.link_bytes(), monitor.daemon_stats(),
                          started, ended, pass_times, dispatch.placement, counters)


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
        host_shaping = cluster.topo.shaping(cluster.topo.service)
    return {"config": _jsonable(asdict(config)), "files": [asdict(f) for f in cluster.files],
            "shaping": shaping, "host_shaping": host_shaping, "modes": results, "started": started,
            "ended": time.time()}


def _jsonable(value):
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return str(value) if isinstance(value, Path) else value

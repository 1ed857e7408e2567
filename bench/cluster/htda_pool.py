"""HTDA in the cluster: the service node, one cache node per worker, and the job-router hooks.

The service host runs one ``htda-node`` with the coordinator, the locator and
the submit agent (the hooks' endpoint on the submit host: a UNIX socket in a
root-owned directory of the run, ``submit.socket``, named in the hooks'
settings file).  Each worker runs a cache node whose union view
(mergerfs) stacks its cache device over the worker's xrootdfs mount of the
storage (or of the worker's read-through cache, see :mod:`.runner`); the
cache copies from the XRootD URL it is given (the storage, or that
read-through cache).  The hooks are
the checkout's own executables in ``hooks/``, run in the service host's
namespace with the job ad on standard input, as HTCondor's job router runs them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from testkit.nodes import write_config

from .services import Daemon
from .topology import Host, Topology, TopologyError

__all__ = ["HTDAPool", "SERVICE_PORT", "CACHE_PORT", "parse_open_counters"]

SERVICE_PORT = 8741
CACHE_PORT = 8742
HOOKS = Path(__file__).resolve().parents[2] / "hooks"
ROUTE_AD = '[ Name = "HTDA"; Requirements = JobUniverse == 5 && HTDA_Routed =!= true; EditJobInPlace = true ]'


class HTDAPool:
    """Configs, processes and hooks of HTDA for one run; ``start()`` then ``stop()``."""

    def __init__(self, topo: Topology, workdir: Path, storage_mounts: dict[str, Path], sources: dict[str, str],
                 cache_bytes: int,
                 unknown_size: int, coordinator_cycle: float = 5.0, cache_cycle: float = 2.0,
                 steer_requirements: bool = False, native_hooks: bool = True, first_read_wait: float = 0.0,
                 first_read_home: bool = False, view: str = "mergerfs", read_through: bool = False,
                 coordinator_options: dict[str, Any] | None = None, submit_options: dict[str, Any] | None = None):
        self.topo, self.workdir = topo, workdir
        self.coordinator_options = dict(coordinator_options or {})  # more [coordinator] settings, as given
        self.submit_options = dict(submit_options or {})  # more [submit] settings, as given
        self.first_read_wait = first_read_wait  # the coordinator's; docs/cache.rst sets it with read-through
        self.first_read_home = first_read_home  # the submit agent's; the same
        self.view = view  # the cache nodes' union driver
        self.storage_mounts = storage_mounts
        self.sources = sources  # worker -> the XRootD URL its cache node copies from
        self.read_through = read_through  # the sources are each worker's own read-through proxy
        self.cache_bytes, self.unknown_size = cache_bytes, unknown_size
        self.coordinator_cycle, self.cache_cycle = coordinator_cycle, cache_cycle
        self.steer_requirements = steer_requirements
        self.native_hooks = native_hooks
        self.hooks_dir = workdir / "hooks"
        self.daemons: dict[str, Daemon] = {}
        self.hooks_config = workdir / "hooks.toml"
        self.hook_log = workdir / "hooks.log"
        self.socket = workdir / "run-htda" / "submit.sock"  # like /run/htda/submit.sock: root's 0755 directory

    # -- configs -----------------------------------------------------------------
    def _url(self, host: Host, port: int) -> str:
        return f"http://{host.address}:{port}"

    def _config(self, host: Host, components: list[str], port: int, sections: dict) -> Path:
        seeds = [self._url(self.topo.service, SERVICE_PORT)]
        path = write_config(self.workdir, host.name, components, port, seeds, sections=sections, interval=1.0,
                            expiry=10.0, read_networks=["127.0.0.0/8", f"{self.topo.subnet}.0/24"])
        # listen on every address of the host's own namespace (loopback for the hooks, eth0 for the pool)
        text = path.read_text().replace(f'listen = "127.0.0.1:{port}"', f'listen = "0.0.0.0:{port}"')
        text = text.replace(f'advertise_url = "http://127.0.0.1:{port}"',
                            f'advertise_url = "{self._url(host, port)}"')
        path.write_text(text)
        return path

    def service_config(self) -> Path:
        return self._config(self.topo.service, ["coordinator", "locator", "submit"], SERVICE_PORT, {
            "coordinator": {"cycle": self.coordinator_cycle, "unknown_size": self.unknown_size,
                            "half_life": 3600.0, "first_read_wait": self.first_read_wait,
                            **self.coordinator_options},
            "submit": {"lookup_timeout": 1.0, "connect_timeout": 0.5, "send_interval": 0.2,
                       "steer_requirements": self.steer_requirements, "socket": str(self.socket),
                       "first_read_home": self.first_read_home, **self.submit_options},
        })

    def cache_config(self, worker: Host) -> Path:
        base = self.workdir / worker.name
        return self._config(worker, ["cache"], CACHE_PORT, {"cache": {
            "storage": "xrootd", "storage_location": self.sources[worker.name],
            "storage_timeout": 60.0,
            "devices": [{"path": str(base / "cache0"), "capacity": self.cache_bytes}],
            "union": self.view, "view": str(base / "view"), "view_storage": str(self.storage_mounts[worker.name]),
            "cycle": self.cache_cycle, "holdings_interval": 10.0, "max_staging": 2,
            # the site rule for copies of remote files: the storage's xrootd lets everyone read (r/o export),
            # so may every job's owner (the default, root only, refuses jobs run as their users)
            "remote_file_mode": "0644", "remote_dir_mode": "0755",
            # through a read-through proxy a file's mtime is when that worker's proxy cached it (docs/cache.rst)
            "peer_mtime_check": not self.read_through,
            "storage_mtime_check": not self.read_through,
            # read the inputs of jobs homed here ahead of them, into the read-through proxy (docs/cache.rst)
            "read_ahead": self.read_through,
        }})

    # -- life cycle --------------------------------------------------------------
    def install_hooks(self) -> None:
        """Install the checkout's hooks as a submit host would, with ``hooks/install-hooks`` (``--native``:
        the compiled job-router hooks, for submit hosts that route many jobs a second)."""
        argv = [sys.executable, str(HOOKS / "install-hooks"), *(["--native"] if self.native_hooks else []),
                str(self.hooks_dir)]
        done = subprocess.run(argv, capture_output=True, text=True)
        if done.returncode != 0:
            raise TopologyError(f"install-hooks failed: {(done.stderr or done.stdout).strip()[-500:]}")

    def write_hooks_settings(self, log: Path | None = None) -> None:
        """The hooks' settings file: the agent's socket, a 2 s deadline (a loaded two-core machine), the log."""
        self.hooks_config.write_text(f'socket = "{self.socket}"\ntimeout = 2.0\nlog = "{log or ""}"\n')
        self.hooks_config.chmod(0o644)

    def start(self) -> None:
        self.install_hooks()
        self.socket.parent.mkdir(mode=0o755, exist_ok=True)
        self.socket.parent.chmod(0o755)
        self.write_hooks_settings(self.hook_log)
        self._start("service", self.topo.service, self.service_config())
        self._wait_healthy("service", self.topo.service, SERVICE_PORT)
        for worker in self.topo.worker_hosts:
            self._start(worker.name, worker, self.cache_config(worker))
        for worker in self.topo.worker_hosts:
            self._wait_healthy(worker.name, worker, CACHE_PORT)
            view = self.workdir / worker.name / "view"
            deadline = time.monotonic() + 30
            while not (os.path.ismount(view) if self.view == "mergerfs" else os.path.isdir(view)):
                self.daemons[worker.name].check()
                if time.monotonic() > deadline:
                    raise TopologyError(f"the union view {view} was not set up")
                time.sleep(0.2)

    def _start(self, name: str, host: Host, config: Path) -> None:
        self.daemons[name] = Daemon(f"htda-node {name}", host, [sys.executable, "-m", "htda.node.daemon", "--config",
                                                                 str(config)], config.with_suffix(".log"),
                                    env={"PYTHONUNBUFFERED": "1"}, cwd=self.workdir)

    def _wait_healthy(self, name: str, host: Host, port: int, timeout: float = 60.0) -> None:
        probe = (f"import urllib.request; urllib.request.urlopen('http://{host.address}:{port}/healthz', "
                 "timeout=2).read()")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.daemons[name].check()
            if subprocess.run(host.cmd(sys.executable, "-c", probe), capture_output=True).returncode == 0:
                return
            time.sleep(0.5)
        raise TopologyError(f"htda-node {name} did not answer /healthz in {timeout}s "
                            f"(log: {self.daemons[name].log})")

    def wait_members(self, timeout: float = 60.0) -> None:
        """Wait until the service node sees every cache node."""
        wanted = {w.name for w in self.topo.worker_hosts}
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if wanted <= {m["name"] for m in self.get(self.topo.service, SERVICE_PORT, "/api/v1/pool")["members"]}:
                return
            time.sleep(0.5)
        raise TopologyError(f"cache nodes did not join the pool in {timeout}s")

    def get(self, host: Host, port: int, path: str) -> dict:
        """A read-only GET from inside the host's namespace (its loopback is a read network)."""
        code = (f"import urllib.request, sys; sys.stdout.write(urllib.request.urlopen("
                f"'http://127.0.0.1:{port}{path}', timeout=5).read().decode())")
        done = subprocess.run(host.cmd(sys.executable, "-c", code), capture_output=True, text=True, timeout=30)
        if done.returncode != 0:
            raise TopologyError(f"GET {path} on {host.name}: {done.stderr.strip()[-300:]}")
        return json.loads(done.stdout)

    def open_counters(self, attempts: int = 3) -> dict[str, dict]:
        """Per worker, what its cache node counted of the opens its jobs made through the view:
        ``{"opens": {source: n}, "bytes": {source: b}}``, or ``{"error": why}`` when its ``/metrics`` could not
        be read (a worker left out would silently change the share)."""
        code = (f"import urllib.request, sys; sys.stdout.write(urllib.request.urlopen("
                f"'http://127.0.0.1:{CACHE_PORT}/metrics', timeout=15).read().decode())")
        found: dict[str, dict] = {}
        for worker in self.topo.worker_hosts:
            error = ""
            for _ in range(attempts):
                try:
                    done = subprocess.run(worker.cmd(sys.executable, "-c", code), capture_output=True, text=True,
                                          timeout=60)
                except subprocess.TimeoutExpired:
                    error = "timed out"
                    continue
                if done.returncode == 0:
                    found[worker.name] = parse_open_counters(done.stdout)
                    break
                error = done.stderr.strip()[-200:]
            else:
                found[worker.name] = {"error": f"/metrics unreadable: {error}"}
        return found

    def stop(self) -> None:
        for daemon in reversed(list(self.daemons.values())):
            daemon.stop(timeout=15)

    def pids(self) -> dict[str, int]:
        return {name: d.pid for name, d in self.daemons.items()}

    # -- hooks ---------------------------------------------------------------------
    def hook(self, name: str, stdin: str) -> str:
        """Run one of the installed hooks in the service host's namespace; its standard output."""
        done = subprocess.run(self.topo.service.cmd(str(self.hooks_dir / name)), input=stdin, capture_output=True,
                              text=True, timeout=30, env={**os.environ, "HTDA_HOOKS_CONFIG": str(self.hooks_config)})
        if done.returncode != 0:
            raise TopologyError(f"hook {name} exited with {done.returncode}: {done.stderr.strip()[-300:]}")
        return done.stdout

    def translate(self, ad: str) -> str:
        return self.hook("htda_translate", f"{ROUTE_AD}\n------\n{ad}")

    def started(self, ad: str, worker: str, slot: int) -> None:
        self.hook("htda_update_job_info", _running(ad, worker, slot, 2))

    def finished(self, source_ad: str, ad: str, worker: str, slot: int) -> None:
        self.hook("htda_job_finalize", f"{source_ad}------\n{_running(ad, worker, slot, 4)}")


def _running(ad: str, worker: str, slot: int, status: int) -> str:
    """The routed job ad as the schedd has it once matched: status, remote host, the machine's HTDA name."""
    keep = [line for line in ad.splitlines()
            if line.split("=", 1)[0].strip() not in ("JobStatus", "RemoteHost", "MachineAttrHTDA_NodeName0")]
    extra = [f"JobStatus = {status}", f'RemoteHost = "slot{slot}@{worker}.htda-bench"',
             f'MachineAttrHTDA_NodeName0 = "{worker}"']
    return "\n".join(sorted(keep + extra)) + "\n"



def parse_open_counters(metrics: str) -> dict[str, dict[str, float]]:
    """``htda_cache_job_opens_total`` and ``htda_cache_job_opened_bytes_total`` by source, from a scrape."""
    wanted = {"htda_cache_job_opens_total": "opens", "htda_cache_job_opened_bytes_total": "bytes"}
    out: dict[str, dict[str, float]] = {"opens": {}, "bytes": {}}
    for line in metrics.splitlines():
        name, _, rest = line.partition("{")
        if name in wanted and rest.startswith('source="'):
            out[wanted[name]][rest.split('"')[1]] = float(line.rsplit(" ", 1)[1])
    return out

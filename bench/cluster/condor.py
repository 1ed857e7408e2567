"""Real HTCondor in the cluster: a central manager on the service host, a startd per worker.

The service host's ``condor_master`` runs the collector, the negotiator and
the schedd (and, in the HTDA run, the job router: HTDA's shipped snippets
``50-htda-submit.config`` and ``50-htda-negotiator.config`` copied verbatim
into its ``config.d``).  Each worker's master runs one startd with
``--slots`` static one-CPU slots (``50-htda-worker.config`` verbatim in the
HTDA run: the startd cron publishes ``HTDA_NodeName`` from the worker's cache
node).  Every master is started as root in its host's network namespace
(``nsenter --net``) and drops to the ``condor`` account; the hosts share the
file system, so HTCondor's FS authentication works between them as it does on
one machine.  A last file, read after the snippets, names where this run
installed the hooks and which settings files they read (as the test pool in
``tests/htcondor`` does), and the bench's short intervals.

Jobs are vanilla jobs of an ordinary account (``htdabench``), one cluster
each, whose executable is a Python every user may run with
``-m bench.cluster.condor_job``; the startd gives each job its worker's paths
in its environment (``STARTER_JOB_ENVIRONMENT``), since the stand-in's
"worker view" is a directory per worker of one shared file system.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.htcondor_home import INSTALL_HINT, condor_home, pool_basics, program
from tests.users import User, ensure_user

from .topology import Host, Topology, TopologyError

__all__ = ["condor_home", "CondorPool", "CondorSetup", "job_python", "BENCH_USER",
           "COLLECTOR_PORT", "INSTALL_HINT", "NEGOTIATOR_INTERVAL"]

REPO = Path(__file__).resolve().parents[2]
SNIPPETS = REPO / "config" / "htcondor"
BENCH_USER = "htdabench"
COLLECTOR_PORT = 9618
DOMAIN = "htda-bench"
#: seconds between negotiation cycles (NEGOTIATOR_INTERVAL; NEGOTIATOR_CYCLE_DELAY and _MIN_INTERVAL the same)
NEGOTIATOR_INTERVAL = 2
#: the bench's intervals, read after HTDA's snippets (the router's poll included: 5 s in the snippet)
INTERVALS = {
    "NEGOTIATOR_INTERVAL": NEGOTIATOR_INTERVAL, "NEGOTIATOR_CYCLE_DELAY": NEGOTIATOR_INTERVAL,
    "NEGOTIATOR_MIN_INTERVAL": NEGOTIATOR_INTERVAL, "SCHEDD_INTERVAL": 5, "UPDATE_INTERVAL": 5,
    "MASTER_UPDATE_INTERVAL": 5, "STARTER_UPDATE_INTERVAL": 5, "SHADOW_QUEUE_UPDATE_INTERVAL": 5,
    "JOB_ROUTER_POLLING_PERIOD": 2,
}


def _others_may_run(path: Path) -> bool:
    """Whether every user may execute ``path`` (and walk to it)."""
    try:
        real = Path(os.path.realpath(path))
        folders = {*Path(os.path.abspath(path)).parents, *real.parents}
        return bool(real.stat().st_mode & stat.S_IXOTH) and all(f.stat().st_mode & stat.S_IXOTH for f in folders)
    except OSError:
        return False


def job_python() -> tuple[str, str]:
    """(interpreter, PYTHONPATH) for the jobs: a Python of this one's version that every user may run, with
    this checkout and this environment's packages (uproot, awkward) on its path."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    candidates = [sys.executable, f"/usr/bin/{version}", shutil.which(version) or ""]
    found = next((c for c in dict.fromkeys(candidates) if c and _others_may_run(Path(c))), None)
    if found is None:
        raise TopologyError(f"no {version} that every user may run (jobs run as {BENCH_USER}); "
                            "a pyenv under /root is not reachable: install Debian's python3")
    return found, f"{REPO}:{sysconfig.get_paths()['purelib']}"


# -- the pool -----------------------------------------------------------------------------------------

@dataclass
class CondorSetup:
    """What a mode asks of the pool: the jobs' paths per worker and, in the HTDA run, HTDA's pieces."""

    roots: dict[str, Path]  # worker -> where its jobs read the dataset (view or storage mount)
    caches: dict[str, Path] = field(default_factory=dict)  # worker -> its cache device's data (HTDA run)
    hook_dir: Path | None = None  # the installed hooks (HTDA run)
    router_settings: Path | None = None  # the hooks' settings file for the job router (HTDA run)
    cron_settings: dict[str, Path] = field(default_factory=dict)  # worker -> the startd cron's settings file
    wait_routed: bool = True  # HTDA run: jobs require HTDA_Routed, so none is matched before the router saw it

    @property
    def htda(self) -> bool:
        return self.hook_dir is not None


@dataclass
class _Master:
    host: Host
    config: Path
    local: Path
    proc: subprocess.Popen | None = None


class CondorPool:
    """The pool of one mode: write configs, start the masters, submit, wait, stop."""

    def __init__(self, home: Path, topo: Topology, workdir: Path, slots: int, account: User,
                 setup: CondorSetup, condor: User | None = None):
        self.home, self.topo, self.workdir, self.slots = home, topo, workdir, slots
        self.account, self.setup = account, setup
        self.condor = condor or ensure_user("condor")  # the account the daemons drop to (CONDOR_IDS)
        self.python, self.pythonpath = job_python()
        self.masters = [_Master(h, workdir / h.name / "condor_config", workdir / h.name / "local")
                        for h in [topo.service, *topo.worker_hosts]]
        self.jobdir = workdir / "jobs"

    # -- configuration ------------------------------------------------------------------------------
    def plumbing(self, host: Host) -> str:
        """The pool's plumbing for one host: directories, addresses, security, its daemons."""
        central = host is self.topo.service
        m = self._master(host)
        lines = [
            "# The cluster bench's plumbing (bench/cluster/condor.py); HTDA's snippets are in config.d/.",
            *pool_basics(self.home, m.local, m.config.parent / "config.d", (self.condor.uid, self.condor.gid),
                         DOMAIN),
            f"CONDOR_HOST = {self.topo.service.address}",
            f"COLLECTOR_HOST = {self.topo.service.address}:{COLLECTOR_PORT}", f"NETWORK_INTERFACE = {host.address}",
            f"NETWORK_HOSTNAME = {host.name}.{DOMAIN}", "NO_DNS = True", f"DEFAULT_DOMAIN_NAME = {DOMAIN}",
            "DAEMON_LIST = MASTER COLLECTOR NEGOTIATOR SCHEDD" if central else "DAEMON_LIST = MASTER STARTD",
        ]
        if not central:
            lines += [f"NUM_CPUS = {self.slots}", f"MEMORY = {1024 * self.slots}",  # static 1-CPU slots
                      "SLOT_TYPE_1 = cpus=1, memory=1024", f"NUM_SLOTS_TYPE_1 = {self.slots}",
                      "SLOT_TYPE_1_PARTITIONABLE = False", "START = True", "SUSPEND = False",
                      "PREEMPT = False", "KILL = False", f"STARTER_JOB_ENVIRONMENT = \"{self._job_env(host)}\""]
        return "\n".join(lines) + "\n"

    def _job_env(self, worker: Host) -> str:
        env = {"HTDA_BENCH_WORKER": worker.name, "HTDA_BENCH_ROOT": self.setup.roots[worker.name],
               "HTDA_BENCH_CACHE": self.setup.caches.get(worker.name, "")}
        return " ".join(f"{k}={v}" for k, v in env.items())

    def last_config(self, host: Host) -> str:
        """Read after the snippets: the bench's intervals and, in the HTDA run, where the hooks are."""
        lines = ["# Read last: the bench's short intervals and where this run installed HTDA's hooks."]
        lines += [f"{name} = {value}" for name, value in INTERVALS.items()]
        if self.setup.htda:
            lines.append(f"HTDA_HOOK_DIR = {self.setup.hook_dir}")
            if host is self.topo.service:
                lines.append(f'JOB_ROUTER_ENVIRONMENT = "HTDA_HOOKS_CONFIG={self.setup.router_settings}"')
            else:
                lines += ["STARTD_CRON_HTDA_EXECUTABLE = $(HTDA_HOOK_DIR)/htda_startd_cron",
                          f'STARTD_CRON_HTDA_ENV = "HTDA_HOOKS_CONFIG={self.setup.cron_settings[host.name]}"']
        return "\n".join(lines) + "\n"

    def snippets(self, host: Host) -> list[Path]:
        """HTDA's shipped snippets this host takes (none without HTDA)."""
        if not self.setup.htda:
            return []
        names = (["50-htda-submit.config", "50-htda-negotiator.config"] if host is self.topo.service
                 else ["50-htda-worker.config"])
        return [SNIPPETS / name for name in names]

    def write_configs(self) -> None:
        for m in self.masters:
            for name in ("log", "spool", "execute", "lock", "run"):
                (m.local / name).mkdir(parents=True, exist_ok=True)
                os.chown(m.local / name, self.condor.uid, self.condor.gid)
            os.chown(m.local, self.condor.uid, self.condor.gid)
            confd = m.config.parent / "config.d"
            confd.mkdir(parents=True, exist_ok=True)
            for snippet in self.snippets(m.host):
                shutil.copyfile(snippet, confd / snippet.name)
            (confd / "99-bench-install.config").write_text(self.last_config(m.host))
            m.config.write_text(self.plumbing(m.host))
            for path in [m.config, *confd.iterdir()]:
                path.chmod(0o644)
        self.jobdir.mkdir(parents=True, exist_ok=True)
        os.chown(self.jobdir, self.account.uid, self.account.gid)

    def _master(self, host: Host) -> _Master:
        return next(m for m in self.masters if m.host is host)

    # -- life cycle -----------------------------------------------------------------------------------
    def env(self, host: Host | None = None) -> dict[str, str]:
        """The environment of the tools and masters (the service host's config for the tools)."""
        m = self._master(host or self.topo.service)
        return {"CONDOR_CONFIG": str(m.config), "LANG": "C.UTF-8",
                "PATH": f"{self.home / 'bin'}:{self.home / 'sbin'}:/usr/sbin:/usr/bin:/sbin:/bin"}

    def start(self, timeout: float = 90.0) -> float:
        """Start every master in its namespace and wait until the pool is complete; seconds it took."""
        started = time.monotonic()
        self.write_configs()
        for m in self.masters:
            with open(m.config.parent / "master.out", "ab") as out:
                m.proc = subprocess.Popen(m.host.cmd(str(self.home / "sbin" / "condor_master"), "-f"),
                                          env=self.env(m.host), stdout=out, stderr=subprocess.STDOUT,
                                          cwd=m.config.parent, start_new_session=True)
        self._wait(self._ready, timeout, "the HTCondor pool to report")
        return time.monotonic() - started

    def _wait(self, ready, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for m in self.masters:
                if m.proc is not None and m.proc.poll() is not None:
                    raise TopologyError(f"condor_master on {m.host.name} exited with {m.proc.returncode}: "
                                        f"{self.tail(m.host, 'MasterLog')}")
            if ready():
                return
            time.sleep(0.5)
        raise TopologyError(f"timed out waiting for {what} (logs under {self.workdir})")

    def _ready(self) -> bool:
        done = self.tool("condor_status", "-any", "-af", "MyType", "Name", check=False)
        kinds = [line.split(" ", 1)[0] for line in done.stdout.splitlines()]
        wanted = ["Negotiator", "Scheduler"] + (["Job_Router"] if self.setup.htda else [])
        if not all(kind in kinds for kind in wanted) or kinds.count("Machine") < self.slots * len(self.masters[1:]):
            return False
        return not self.setup.htda or self.htda_names() == {w.name for w in self.topo.worker_hosts}

    def htda_names(self) -> set[str]:
        """The HTDA node names the workers' startd cron published (those with ``HTDA_Up``)."""
        done = self.tool("condor_status", "-af", "HTDA_NodeName", "HTDA_Up", check=False)
        return {line.split()[0] for line in done.stdout.splitlines() if line.endswith(" true")}

    def stop(self, timeout: float = 20.0) -> None:
        """Fast shutdown of every master (SIGQUIT), then SIGKILL to whatever is left of its tree."""
        trees = {m.host.name: _descendants(m.proc.pid) for m in self.masters if m.proc is not None}
        for m in self.masters:
            if m.proc is not None and m.proc.poll() is None:
                m.proc.send_signal(signal.SIGQUIT)
        for m in self.masters:
            if m.proc is None:
                continue
            try:
                m.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                m.proc.kill()
                m.proc.wait(10)
            for pid in trees[m.host.name]:  # daemons, shadows, starters, jobs (they leave the master's group)
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    def pids(self) -> dict[str, int]:
        return {f"condor {m.host.name}": m.proc.pid for m in self.masters if m.proc is not None}

    def tail(self, host: Host, log: str, lines: int = 20) -> str:
        try:
            text = (self._master(host).local / "log" / log).read_text(errors="replace").splitlines()
        except OSError as exc:
            return f"({log}: {exc})"
        return "\n".join(text[-lines:])

    # -- tools -------------------------------------------------------------------------------------
    def program(self, name: str) -> Path:
        """The executable behind tool ``name`` (see :func:`tests.htcondor_home.program`)."""
        return program(self.home, name)

    def tool(self, name: str, *args: str, as_user: bool = False, stdin: str | None = None, check: bool = True,
             cwd: Path | None = None) -> subprocess.CompletedProcess:
        """Run a tool in the service host's namespace, as root or as the bench's account."""
        argv = [name, *args]
        if as_user:  # through bash: the exec with argv[0] happens with the account's rights alone
            a = self.account
            argv = ["setpriv", f"--reuid={a.uid}", f"--regid={a.gid}", "--clear-groups", "--inh-caps=-all",
                    "--", "/bin/bash", "-c", 'exec -a "$0" "$@"', name, str(self.program(name)), *args]
            done = subprocess.run(self.topo.service.cmd(*argv), env=self.env(), capture_output=True, text=True,
                                  timeout=120, input=stdin, cwd=cwd)
        else:
            done = subprocess.run(self.topo.service.cmd("/bin/bash", "-c", 'exec -a "$0" "$@"', name,
                                                        str(self.program(name)), *args),
                                  env=self.env(), capture_output=True, text=True, timeout=120, input=stdin, cwd=cwd)
        if check and done.returncode != 0:
            why = (done.stderr or done.stdout)[-800:]
            raise TopologyError(f"{name} {' '.join(args)}: exit {done.returncode}: {why}")
        return done

    # -- jobs --------------------------------------------------------------------------------------
    def description(self, job_id: str, pass_no: int, inputs: list[str]) -> str:
        """A job's submit description: one vanilla job running the analysis on its inputs."""
        name = _file_name(job_id)
        lines = {
            "universe": "vanilla", "executable": self.python, "transfer_executable": "false",
            "arguments": f'"-m bench.cluster.condor_job --job \'{job_id}\' {" ".join(inputs)}"',
            "environment": f'"PYTHONPATH={self.pythonpath} PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1"',
            "initialdir": str(self.jobdir), "output": f"{name}.out", "error": f"{name}.err", "log": "jobs.log",
            "request_cpus": "1", "request_memory": "900", "request_disk": "1024", "should_transfer_files": "NO",
            "+HTDA_InputFiles": '"' + ",".join(inputs) + '"', "+HTDA_Pass": str(pass_no),
            "+HTDA_BenchJob": f'"{job_id}"',
        }
        if self.setup.htda and self.setup.wait_routed:  # docs/htcondor.rst, caveats: "Jobs matched before routing"
            lines["requirements"] = "(HTDA_Routed =?= true)"
        return "".join(f"{k} = {v}\n" for k, v in lines.items()) + "queue\n"

    def submit(self, job_id: str, pass_no: int, inputs: list[str]) -> int:
        """Submit one job as the bench's account; its cluster id."""
        done = self.tool("condor_submit", "-terse", "-", as_user=True, cwd=self.jobdir,
                         stdin=self.description(job_id, pass_no, inputs))
        match = re.match(r"\s*(\d+)\.0", done.stdout)
        if not match:
            raise TopologyError(f"condor_submit: {done.stderr}{done.stdout}")
        return int(match.group(1))

    def queue(self) -> dict[int, tuple[int, str]]:
        """Jobs in the queue: cluster -> (JobStatus, HoldReason)."""
        done = self.tool("condor_q", "-allusers", "-af:t", "ClusterId", "JobStatus", "HoldReason")
        out = {}
        for line in done.stdout.splitlines():
            parts = line.split("\t")
            if len(parts) >= 2 and parts[0].isdigit():
                out[int(parts[0])] = (int(parts[1]), parts[2] if len(parts) > 2 else "")
        return out

    def result(self, job_id: str) -> dict:
        """The finished job's result line (its standard output), or an error record."""
        out, err = (self.jobdir / f"{_file_name(job_id)}{suffix}" for suffix in (".out", ".err"))
        try:
            return json.loads(out.read_text().strip().splitlines()[-1])
        except (OSError, ValueError, IndexError):
            tail = err.read_text(errors="replace")[-800:] if err.exists() else ""
            return {"job": job_id, "error": f"no result in {out}: {tail}"}


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _file_name(job_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", job_id)

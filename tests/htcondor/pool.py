"""A real HTCondor personal pool for the tests, and the tools to drive it.

The pool runs on loopback, started as root, with the daemons dropping to the
``condor`` account; ordinary accounts submit the jobs.  Its configuration is
the pool's plumbing (directories, port, security, short intervals, two startds
under one master) plus the project's ``config/htcondor/`` snippets, copied
verbatim into the pool's config directory.  One last file, read after the
snippets, names where this run installed the hooks (``HTDA_HOOK_DIR``, the
startd cron's executable) and which hooks' settings file they read
(``HTDA_HOOKS_CONFIG`` in the environment of the job router and of each
startd's cron job).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from testkit.nodes import free_port, wait_until
from testkit.processes import ProcessExited
from tests.htcondor_home import pool_basics, program
from tests.users import User, run_as

__all__ = ["Startd", "PersonalPool", "parse_ads", "job_description", "changes", "make_root", "install_hooks",
           "write_hooks_settings", "SNIPPETS", "UID_DOMAIN"]

ROOT = Path(__file__).resolve().parents[2]
SNIPPETS = ROOT / "config" / "htcondor"
HOOKS = ROOT / "hooks"
HOOKS_SETTINGS = ROOT / "config" / "hooks.toml"
UID_DOMAIN = "htda.test"
LAST_CONFIG = "99-test-pool-install.config"


@dataclass(frozen=True)
class Startd:
    """One startd of the pool: its name (``STARTD_NAME``, local name, and the HTDA node name its
    cron publishes), its memory in MB (one partitionable slot, 1 CPU), its cron's hooks settings."""

    name: str
    memory: int
    settings: Path


def make_root(prefix: str = "htda-condor-") -> Path:
    """A fresh directory under /tmp that every account may traverse (pytest's own is 0700)."""
    root = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    root.chmod(0o755)
    return root


def parse_ads(text: str) -> list[dict[str, str]]:
    """Ads in the long format (``condor_q -l``, ``condor_status -l``): ``{attribute: expression}``."""
    ads, ad = [], {}
    for line in text.splitlines() + [""]:
        if not line.strip():
            if ad:
                ads.append(ad)
            ad = {}
            continue
        name, sep, value = line.partition(" = ")
        if sep:
            ad[name.strip()] = value.strip()
    return ads


def install_hooks(target: Path, native: bool = False) -> list[Path]:
    """Run ``hooks/install-hooks [--native] target`` (it picks a Python every job owner may run);
    the files it wrote."""
    argv = [sys.executable, str(HOOKS / "install-hooks"), *(["--native"] if native else []), str(target)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"install-hooks failed: {(done.stderr or done.stdout).strip()[-800:]}")
    return [Path(line) for line in done.stdout.split()]


def write_hooks_settings(path: Path, **values: object) -> Path:
    """The shipped ``config/hooks.toml`` with ``values`` replacing (or adding) its keys; mode 0644."""
    def literal(value: object) -> str:
        if isinstance(value, bool):
            return "true" if value else "false"
        return f'"{value}"' if isinstance(value, str) else repr(value)

    lines, seen = [], set()
    for line in HOOKS_SETTINGS.read_text().splitlines():
        key = line.partition("=")[0].strip()
        if "=" in line and not line.lstrip().startswith("#") and key in values:
            line, _ = f"{key} = {literal(values[key])}", seen.add(key)
        lines.append(line)
    lines += [f"{key} = {literal(value)}" for key, value in values.items() if key not in seen]
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o644)
    return path


def _processes_with(variable: bytes) -> list[int]:
    """The processes whose environment holds ``variable`` (``NAME=value``): a pool's daemons carry
    its CONDOR_CONFIG, also once they have lost their master (each daemon is its own session)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if variable in (entry / "environ").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


class PersonalPool:
    """A personal pool under ``root``: write its config, start, drive and stop it."""

    def __init__(self, home: Path, root: Path, condor: User, hook_dir: Path, hooks_settings: Path,
                 startds: list[Startd]):
        self.home, self.root, self.condor = home, root, condor
        self.hook_dir, self.hooks_settings, self.startds = hook_dir, hooks_settings, startds
        self.config = root / "condor_config"
        self.config_dir = root / "config.d"
        self.local = root / "local"
        self.port = free_port()
        self.master: subprocess.Popen | None = None
        self.started_in: float | None = None

    # -- configuration ---------------------------------------------------------------------------

    def env(self) -> dict[str, str]:
        """The environment of HTCondor's tools and of the master."""
        path = f"{self.home / 'bin'}:{self.home / 'sbin'}:/usr/sbin:/usr/bin:/sbin:/bin"
        return {"CONDOR_CONFIG": str(self.config), "PATH": path, "LANG": "C.UTF-8"}

    def write_config(self) -> None:
        """The plumbing, the shipped snippets verbatim, and the install locations (read last)."""
        for name in ("log", "spool", "execute", "lock", "run", *(f"execute-{s.name}" for s in self.startds)):
            directory = self.local / name
            directory.mkdir(parents=True, exist_ok=True)
            os.chown(directory, self.condor.uid, self.condor.gid)
        os.chown(self.local, self.condor.uid, self.condor.gid)
        self.config_dir.mkdir(exist_ok=True)
        for snippet in sorted(SNIPPETS.glob("*.config")):
            shutil.copyfile(snippet, self.config_dir / snippet.name)
        (self.config_dir / LAST_CONFIG).write_text(self._install_config())
        self.config.write_text(self._plumbing())
        for path in [self.config, *self.config_dir.iterdir()]:
            path.chmod(0o644)
        self.config_dir.chmod(0o755)

    def _plumbing(self) -> str:
        startds = " ".join(f"STARTD_{s.name.upper()}" for s in self.startds)
        lines = [
            "# The test pool's plumbing (tests/htcondor/pool.py); HTDA's snippets are in config.d/.",
            *pool_basics(self.home, self.local, self.config_dir, (self.condor.uid, self.condor.gid), UID_DOMAIN),
            "CONDOR_HOST = 127.0.0.1", f"COLLECTOR_HOST = 127.0.0.1:{self.port}", "NETWORK_INTERFACE = 127.0.0.1",
            f"DAEMON_LIST = MASTER COLLECTOR NEGOTIATOR SCHEDD {startds}",
            f"DC_DAEMON_LIST = + {startds}",
            "NUM_CPUS = 1", "START = True", "SUSPEND = False", "PREEMPT = False", "KILL = False",
            "SCHEDD_INTERVAL = 5", "NEGOTIATOR_INTERVAL = 2",
            "NEGOTIATOR_CYCLE_DELAY = 5", "UPDATE_INTERVAL = 5", "MASTER_UPDATE_INTERVAL = 5",
            "STARTER_UPDATE_INTERVAL = 5", "SHADOW_QUEUE_UPDATE_INTERVAL = 5",
            "JOB_ROUTER_DEBUG = D_FULLDEBUG",
        ]
        for startd in self.startds:
            daemon, local = f"STARTD_{startd.name.upper()}", startd.name
            lines += [
                f"{daemon} = $(STARTD)", f"{daemon}_ARGS = -local-name {local}",
                f"{local}.STARTD_NAME = {startd.name}", f"{local}.STARTD_LOG = $(LOG)/StartLog.{local}",
                f"{local}.STARTD_ADDRESS_FILE = $(LOG)/.startd_address.{local}",
                f"{local}.EXECUTE = $(LOCAL_DIR)/execute-{local}", f"{local}.MEMORY = {startd.memory}",
            ]
        return "\n".join(lines) + "\n"

    def _install_config(self) -> str:
        """Where this run installed HTDA (read after the snippets, so it wins over their paths)."""
        lines = [
            "# Where the test run installed HTDA's hooks, and the settings file they read.",
            f"HTDA_HOOK_DIR = {self.hook_dir}",
            "STARTD_CRON_HTDA_EXECUTABLE = $(HTDA_HOOK_DIR)/htda_startd_cron",
            f'JOB_ROUTER_ENVIRONMENT = "HTDA_HOOKS_CONFIG={self.hooks_settings}"',
        ]
        lines += [f'{s.name}.STARTD_CRON_HTDA_ENV = "HTDA_HOOKS_CONFIG={s.settings}"' for s in self.startds]
        return "\n".join(lines) + "\n"

    # -- life cycle --------------------------------------------------------------------------------

    def start(self, timeout: float = 60.0) -> float:
        """Start the master (as root, in the foreground) and wait until every daemon reports."""
        started = time.monotonic()
        out = open(self.root / "master.out", "ab")
        self.master = subprocess.Popen([str(self.home / "sbin" / "condor_master"), "-f"], env=self.env(),
                                       stdout=out, stderr=subprocess.STDOUT, cwd=self.root)
        out.close()
        wait_until(self._ready, timeout=timeout, interval=0.5, what=f"the HTCondor pool under {self.root}")
        self.started_in = time.monotonic() - started
        return self.started_in

    def _ready(self) -> bool:
        if self.master is not None and self.master.poll() is not None:
            raise ProcessExited(f"condor_master exited with {self.master.returncode}: {self.tail('MasterLog')}")
        done = self.tool("condor_status", "-any", "-af", "MyType", "Name", check=False)
        kinds = [line.split(" ", 1)[0] for line in done.stdout.splitlines()]
        return (all(kind in kinds for kind in ("Negotiator", "Scheduler", "Job_Router"))
                and kinds.count("Machine") >= len(self.startds))

    def stop(self, timeout: float = 30.0) -> None:
        """Fast shutdown (SIGQUIT to the master), then SIGKILL to whatever of this pool is left."""
        if self.master is not None and self.master.poll() is None:
            self.master.send_signal(signal.SIGQUIT)
            try:
                self.master.wait(timeout)
            except subprocess.TimeoutExpired:
                self.master.kill()
                self.master.wait(10)
        for pid in _processes_with(f"CONDOR_CONFIG={self.config}".encode()):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    @contextlib.contextmanager
    def knobs(self, daemon: str | None, text: str = "", **values: str) -> Iterator[None]:
        """Configuration read after everything else, for one ``daemon`` (reconfigured; None: every
        daemon, through the master, as the job router needs): ``values`` as ``NAME = value`` lines,
        after ``text`` (for what needs more, such as a ``@=`` block)."""
        override = self.config_dir / "99-zz-test-override.config"
        override.write_text(text + "".join(f"{name} = {value}\n" for name, value in values.items()))
        override.chmod(0o644)
        which = ("-daemon", daemon) if daemon else ()
        self.tool("condor_reconfig", *which)
        try:
            yield
        finally:
            override.unlink()
            self.tool("condor_reconfig", *which)

    def tail(self, log: str, lines: int = 30, having: str = "") -> str:
        """The last lines of one of the pool's logs (that contain ``having``), for failure messages."""
        try:
            text = (self.local / "log" / log).read_text(errors="replace").splitlines()
        except OSError as exc:
            return f"({log}: {exc})"
        return "\n".join([line for line in text if having in line][-lines:])

    # -- tools ---------------------------------------------------------------------------------------

    def tool(self, name: str, *args: str, user: User | None = None, check: bool = True,
             cwd: Path | None = None, stdin: str | None = None) -> subprocess.CompletedProcess:
        """Run one of HTCondor's tools, as root or as ``user`` (through bash, which also makes the
        tool's own exec happen with the user's rights alone)."""
        program = self.program(name)
        if user is None:
            done = subprocess.run([name, *args], executable=program, env=self.env(), capture_output=True,
                                  text=True, timeout=60, cwd=cwd, input=stdin)
        else:
            done = run_as(user, ["/bin/bash", "-c", 'exec -a "$0" "$@"', name, str(program), *args],
                          env=self.env(), cwd=cwd, input=stdin)
        if check and done.returncode != 0:
            raise RuntimeError(f"{name} {' '.join(args)}: exit {done.returncode}: {done.stderr or done.stdout}")
        return done

    def program(self, name: str) -> Path:
        """The executable behind tool ``name`` (see :func:`tests.htcondor_home.program`)."""
        return program(self.home, name)

    def job_dir(self, user: User) -> Path:
        """A directory of ``user``'s own for submit files, job logs and output."""
        directory = self.root / "jobs" / user.name
        directory.mkdir(parents=True, exist_ok=True)
        os.chown(directory, user.uid, user.gid)
        return directory

    def submit(self, user: User, description: dict[str, str]) -> str:
        """Submit one job as ``user``; its id ``cluster.proc``."""
        directory = self.job_dir(user)
        text = "".join(f"{key} = {value}\n" for key, value in description.items()) + "queue\n"
        done = self.tool("condor_submit", "-terse", "-", user=user, cwd=directory, stdin=text)
        match = re.match(r"\s*(\d+)\.(\d+)", done.stdout)
        if not match:
            raise RuntimeError(f"condor_submit as {user.name}: {done.stderr}{done.stdout}")
        return f"{match.group(1)}.{match.group(2)}"

    def job(self, job_id: str) -> dict[str, str] | None:
        """The job's ad from the queue, or None when it has left it."""
        ads = parse_ads(self.tool("condor_q", "-l", job_id).stdout)
        return ads[0] if ads else None

    def finished(self, job_id: str) -> dict[str, str] | None:
        """The job's ad from the history, or None while it is not there."""
        ads = parse_ads(self.tool("condor_history", "-l", "-limit", "1", job_id).stdout)
        return ads[0] if ads else None

    def wait_finished(self, job_id: str, timeout: float = 90.0) -> dict[str, str]:
        """Wait until the job completed; its history ad."""
        return wait_until(lambda: self.finished(job_id), timeout=timeout, interval=0.5,
                          what=f"job {job_id} to finish (ScheddLog: {self.tail('SchedLog', 5)})")

    def slots(self) -> dict[str, dict[str, str]]:
        """The machine ads in the collector by the name of their startd (``STARTD_NAME``)."""
        ads = parse_ads(self.tool("condor_status", "-l").stdout)
        return {ad["Name"].strip('"').split("@")[1]: ad for ad in ads if ad.get("Name", "").count("@") >= 2}

    def remove(self, job_id: str, user: User) -> None:
        """Remove a job (as its owner), ignoring one that is gone already."""
        self.tool("condor_rm", job_id, user=user, check=False)


def job_description(inputs: list[str] | None = None, requirements: str | None = None,
                    **attributes: str) -> dict[str, str]:
    """A vanilla ``/bin/true`` job's submit description; ``inputs`` go to ``HTDA_InputFiles``,
    ``attributes`` become ``+Name = value`` lines (values are ClassAd expressions)."""
    description = {"universe": "vanilla", "executable": "/bin/true", "request_cpus": "1",
                   "request_memory": "64", "request_disk": "1024", "should_transfer_files": "NO",
                   "log": "jobs.log"}
    if requirements:
        description["requirements"] = requirements
    if inputs:
        description["+HTDA_InputFiles"] = '"' + ",".join(inputs) + '"'
    description.update({f"+{name}": value for name, value in attributes.items()})
    return description


def changes(before: dict[str, str], after: dict[str, str], ignore: set[str]) -> dict[str, tuple]:
    """``{attribute: (before, after)}`` for every attribute added, removed or changed, but ``ignore``."""
    names = (set(before) | set(after)) - ignore
    return {n: (before.get(n), after.get(n)) for n in sorted(names) if before.get(n) != after.get(n)}

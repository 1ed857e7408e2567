"""One real HTCondor personal pool per test run, with HTDA installed as a site would install it.

``htda_pool`` (session): an ``htda-node`` running the submit agent, coordinator and
locator (like ``config/all-in-one.toml``); two worker nodes ``w1`` and ``w2`` (pool
members without a cache, whose holdings the tests report to the locator); the hooks
written by ``hooks/install-hooks``; and a personal pool (collector, negotiator, schedd,
job router, one startd per worker) configured with the shipped snippets.  Where HTCondor
or root is missing the tests are skipped with one line; under CI with
``../shared/htcondor`` present they fail instead.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

import pytest

from htda.node.client import Client
from htda.node.runtime import Node
from testkit.nodes import SECRET, NodeProcess, free_port, start_inprocess, write_config
from tests.htcondor_home import INSTALL_HINT, SHARED, condor_home
from tests.users import NAMES, User, ensure_user

from .pool import PersonalPool, Startd, install_hooks, make_root, write_hooks_settings

PREFIXES = [{"prefix": "/storage/", "lfn": "/"}]
WORKERS = {"w1": 2048, "w2": 1024}  # name -> slot memory (MB): the default PRE_JOB_RANK prefers w2
_TIMES: dict[str, float] = {}


def unavailable(reason: str) -> NoReturn:
    """Skip with one line; under CI, where ../shared/htcondor exists, fail instead."""
    if os.environ.get("CI") and SHARED.exists():
        pytest.fail(f"CI: {SHARED} exists but the real-HTCondor tests cannot run: {reason}", pytrace=False)
    pytest.skip(reason)


@dataclass
class HTDAPool:
    """The running pool and HTDA around it, as the tests use them."""

    pool: PersonalPool
    agent: NodeProcess
    workers: dict[str, Node]
    owners: tuple[User, User]
    sockets: Path  # root's, 0755, like /run/htda: the agent's socket and the fakes'
    settings_values: dict[str, object] = field(default_factory=dict)

    @property
    def settings(self) -> Path:
        """The hooks' settings file the job router passes to them (``HTDA_HOOKS_CONFIG``)."""
        return self.pool.hooks_settings

    def use_hooks(self, variant: str) -> None:
        """Install the Python or the native hooks into the pool's ``HTDA_HOOK_DIR``."""
        install_hooks(self.pool.hook_dir, native=variant == "native")

    @contextlib.contextmanager
    def hooks_pointed_at(self, socket: Path) -> Iterator[None]:
        """The hooks talk to whatever serves ``socket`` instead of the agent for the duration."""
        write_hooks_settings(self.settings, **{**self.settings_values, **settings_for(socket)})
        try:
            yield
        finally:
            write_hooks_settings(self.settings, **self.settings_values)

    @contextlib.contextmanager
    def agent_configured(self, **submit: object) -> Iterator[NodeProcess]:
        """A second submit agent, with ``submit`` settings besides the fixture's, using this pool's
        coordinator and locator; the hooks talk to it for the duration."""
        socket = self.sockets / "configured.sock"
        agent = _start_agent(self.agent.config.parent, socket, name="configured", seed=self.agent.url,
                             components=("submit",),
                             locators=[self.agent.url], coordinators=[self.agent.url], **submit)
        try:
            with self.hooks_pointed_at(socket):
                yield agent
        finally:
            agent.stop()

    def report_holdings(self, holdings: dict[str, dict[str, int]]) -> None:
        """Report ``{node: {lfn: size}}`` to the locator as each cache node would (signed)."""
        client = Client(SECRET.encode(), retries=0)
        try:
            for node, files in holdings.items():
                client.post(f"{self.agent.url}/api/v1/locator/holdings",
                            {"node": node, "files": [{"lfn": k, "size": v} for k, v in files.items()],
                             "replace": True})
        finally:
            client.close()

    def restart_agent(self) -> None:
        """Start the agent's node again after a test stopped it."""
        if self.agent.proc is None or self.agent.proc.poll() is not None:
            self.agent.start()


def settings_for(socket: Path) -> dict[str, object]:
    """What the hooks' settings must say to reach an agent (real or fake) on the UNIX ``socket``."""
    return {"socket": str(socket)}


def _start_agent(directory: Path, socket: Path, name: str = "submit", seed: str | None = None,
                 components: tuple[str, ...] = ("submit", "coordinator", "locator"), **submit: object) -> NodeProcess:
    port = free_port()
    seed = seed or f"http://127.0.0.1:{port}"
    sections = {"submit": {"lfn_prefixes": PREFIXES, "socket": str(socket), **submit},
                **({"coordinator": {"cycle": 3600.0}} if "coordinator" in components else {}),
                # the tests report holdings of nodes that never join (w9: a cache node without a startd): they must
                # outlast a test's wait for idle slots and the router's poll, not the pool expiry of 3 s
                **({"locator": {"unknown_grace": 600.0}} if "locator" in components else {})}
    config = write_config(directory, name, list(components), port, [seed], sections=sections)
    return NodeProcess(config).start()


def _start_workers(directory: Path, seed: str) -> dict[str, Node]:
    workers = {}
    for name in WORKERS:
        port = free_port()
        workers[name] = start_inprocess(write_config(directory, name, [], port, [seed]))
    return workers


def _build(root: Path, home: Path, owners: tuple[User, User], stack: contextlib.ExitStack) -> HTDAPool:
    condor = ensure_user("condor")
    sockets = root / "run-htda"
    sockets.mkdir(mode=0o755)
    agent = _start_agent(root / "nodes", sockets / "submit.sock")
    stack.callback(agent.stop)
    workers = _start_workers(root / "nodes", agent.url)
    for worker in workers.values():
        stack.callback(worker.stop)
    hook_dir = root / "libexec-htda"
    install_hooks(hook_dir)
    values = settings_for(sockets / "submit.sock")
    settings = write_hooks_settings(root / "hooks.toml", **values)
    startds = [Startd(name, memory, write_hooks_settings(root / f"hooks-{name}.toml", node=workers[name].url))
               for name, memory in WORKERS.items()]
    pool = PersonalPool(home, root, condor, hook_dir, settings, startds)
    pool.write_config()
    stack.callback(pool.stop)
    pool.start()
    _TIMES["pool start-up"] = pool.started_in or 0.0
    return HTDAPool(pool, agent, workers, owners, sockets, values)


@pytest.fixture(scope="session")
def htda_pool() -> Iterator[HTDAPool]:
    """The personal pool with HTDA (see the module docstring); stopped and removed at the end."""
    home = condor_home()
    if home is None:
        unavailable(INSTALL_HINT)
    if os.geteuid() != 0:
        unavailable("the real-HTCondor tests need root (the daemons drop to the condor account)")
    owners = (ensure_user(NAMES[0]), ensure_user(NAMES[1]))  # the two_users accounts, after the checks above
    root = make_root()
    with contextlib.ExitStack() as stack:
        if not os.environ.get("HTDA_KEEP_CONDOR_POOL"):  # set it to read the daemons' logs after a run
            stack.callback(shutil.rmtree, root, True)
        try:
            setup = _build(root, home, owners, stack)
        except Exception as exc:  # noqa: BLE001 - one line why, then skip (or fail under CI)
            unavailable(f"the HTCondor personal pool did not start: {type(exc).__name__}: {exc}")
        yield setup


@pytest.fixture(params=["python", "native"])
def hooks(request, htda_pool: HTDAPool) -> Iterator[str]:
    """The job-router hooks as installed by ``install-hooks``: the Python ones, then the native ones."""
    if request.param == "native" and not (shutil.which("cc") or shutil.which("gcc")):
        pytest.skip("no C compiler: install-hooks --native cannot build the native hooks here")
    htda_pool.use_hooks(request.param)
    yield request.param
    if request.param == "native":
        htda_pool.use_hooks("python")


def pytest_runtest_logreport(report) -> None:
    """Add up what the real-pool tests take (set-up, call and tear-down), for the summary."""
    if report.nodeid.startswith("tests/htcondor/"):
        what = "tests (set-up, calls, tear-down)"
        _TIMES[what] = _TIMES.get(what, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter) -> None:
    """Print the pool's start-up time and the real-pool tests' share of the run."""
    for what, seconds in _TIMES.items():
        terminalreporter.write_line(f"HTCondor personal pool: {what} {seconds:.1f} s")

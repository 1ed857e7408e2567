"""Shared fixtures: real nodes on loopback ports, torn down after each test."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from htda.node.client import Client
from htda.node.clock import SYSTEM_CLOCK, Clock
from htda.node.runtime import load_config
from testkit.nodes import SECRET, NodeProcess, free_port, start_inprocess, wait_until, write_config
from testkit.processes import ProcessExited

ALL_IN_ONE = Path(__file__).resolve().parents[1] / "config" / "all-in-one.toml"
#: seconds a test marked ``slow`` (an end-to-end run) may take; every other test has pyproject's 60
SLOW_TIMEOUT = 300


#: pytest-xdist workers per core (``-n auto``, pyproject's addopts): most tests wait on sockets, subprocesses
#: and the cycles of real nodes rather than compute (75 s of CPU in 259 s when run in one process).  On the
#: 2-core machine, ``-m "not slow"`` took 99-100 s with 2 per core, 67 s with 3, 71 s with 4
WORKERS_PER_CORE = 3


def pytest_xdist_auto_num_workers(config):
    """``-n auto``: :data:`WORKERS_PER_CORE` workers per core the process may use (xdist's default is one)."""
    return WORKERS_PER_CORE * len(os.sched_getaffinity(0))


def pytest_xdist_make_scheduler(config, log):
    """Which tests share a worker: see :mod:`testkit.xdist`."""
    from testkit.xdist import GroupScheduling

    return GroupScheduling(config, log)


def pytest_collection_modifyitems(items):
    """Slow end-to-end tests keep the old budget of 300 s unless they name their own ``timeout``."""
    for item in items:
        if item.get_closest_marker("slow") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(SLOW_TIMEOUT))


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    """On an xdist worker, a slow test runs only while no other worker runs one (:func:`testkit.xdist.slow_lock`).
    The lock is taken outside pytest-timeout's wrapper: the wait for it is not counted in the test's budget."""
    if not (item.get_closest_marker("slow") and os.environ.get("PYTEST_XDIST_WORKER")):
        yield
        return
    from testkit.xdist import slow_lock

    # xdist gives each worker the base temporary directory popen-gwN/ in one directory of this run
    with slow_lock(Path(item.config.option.basetemp).parent):
        yield


def _client(secret: bytes | None):
    client = Client(secret, retries=0)
    yield client
    client.close()


@pytest.fixture
def signed():
    """A PycURL client that signs with the test pool's secret."""
    yield from _client(SECRET.encode())


@pytest.fixture
def anonymous():
    """A PycURL client without a secret (as a user or an attacker would be)."""
    yield from _client(None)


def _config(tmp_path, name: str, components: list[str], seeds: list[str] | None, sections: dict | None,
            pool: dict):
    port = free_port()
    url = f"{pool.get('scheme', 'http')}://127.0.0.1:{port}"
    return write_config(tmp_path, name, components, port, seeds if seeds is not None else [url],
                        sections=sections, **pool)


T = TypeVar("T")
_PORT_TAKEN = "Address already in use"


def _on_a_free_port(start: Callable[[Path], T], config: Callable[[], Path]) -> T:
    """``start(config())``, again with a new config (a new port) when the port was taken.

    free_port() checks a port that the node binds only later: another worker's server may take it between the
    two (rarely; seen once in 1,269 tests).  The node then fails to start before it has started anything (its
    server binds first), in process (OSError) or as a subprocess (ProcessExited, its log saying so)."""
    for attempt in range(3):
        try:
            return start(config())
        except (OSError, ProcessExited) as exc:
            if _PORT_TAKEN not in str(exc) or attempt == 2:
                raise
    raise AssertionError("unreachable")


@pytest.fixture
def node_factory(tmp_path):
    """Start ``htda-node`` subprocesses: ``node_factory(name, components, seeds=None, sections=None)``.

    The first node started without seeds becomes its own seed.  All nodes
    share one secret and are stopped at teardown.
    """
    started: list[NodeProcess] = []

    def make(name: str, components: list[str], seeds: list[str] | None = None,
             sections: dict | None = None, start: bool = True, **pool) -> NodeProcess:
        def started_process(config: Path) -> NodeProcess:
            proc = NodeProcess(config)
            started.append(proc)
            if not start:
                return proc
            try:
                return proc.start()
            except ProcessExited as exc:
                if _PORT_TAKEN in str(exc):
                    proc.log.unlink()  # the next attempt's log starts empty
                raise

        return _on_a_free_port(started_process, lambda: _config(tmp_path, name, components, seeds, sections, pool))

    yield make
    for proc in started:
        proc.stop()


@pytest.fixture
def inprocess_node(tmp_path):
    """Start a :class:`htda.node.runtime.Node` in this process (faster, no kill); ``clock=FakeClock()`` for one
    whose time a test moves."""
    nodes = []

    def make(name: str, components: list[str], seeds: list[str] | None = None, sections: dict | None = None,
             clock: Clock = SYSTEM_CLOCK, **pool):
        node = _on_a_free_port(lambda config: start_inprocess(config, clock),
                               lambda: _config(tmp_path, name, components, seeds, sections, pool))
        nodes.append(node)
        return node

    yield make
    for node in nodes:
        node.stop()


@pytest.fixture
def cached_node(inprocess_node, tmp_path):
    """A node with the example all-in-one's components, named ``all-in-one``, whose cache copied a dataset of
    two ROOT files (``node.lfns``) from its POSIX storage after one job read them, and failed to copy a pinned
    file its storage lacks (``node.missing``): every listing an operator reads has something in it."""
    from htda.demo import wait_for_copies, write_dataset

    storage = tmp_path / "storage"
    (lfns,) = write_dataset(storage, 1, 2, 2000, say=lambda text: None)
    node = inprocess_node("all-in-one", load_config(ALL_IN_ONE)["node"]["components"], sections={
        "coordinator": {"cycle": 600.0}, "submit": {"socket": str(tmp_path / "submit.sock")},
        # holdings_interval: the first report to the locator comes after min(interval, 5 s); 1 s keeps the set-up
        # from waiting 5 s for it (wait_for_copies waits until the locator knows the copies)
        "cache": {"storage": "posix", "storage_location": str(storage), "cycle": 600.0, "holdings_interval": 1.0,
                  "devices": [{"path": str(tmp_path / "dev0")}]}})
    api = f"{node.url}/api/v1"
    node.client.post(f"{api}/coordinator/jobs", {"jobs": [{
        "job_id": "demo#100.0", "owner": "alice", "inputs": lfns,
        "sizes": {lfn: (storage / lfn.lstrip("/")).stat().st_size for lfn in lfns}}]})
    assert len(wait_for_copies(node.client, node.url, 30, say=lambda text: None)) == 2
    node.lfns, node.missing = lfns, "/store/demo/dataset2/events_001.root"
    node.client.post(f"{api}/coordinator/pins", {"lfns": [node.missing], "pin": True})
    node.client.post(f"{api}/coordinator/cycle", {"full": True})
    node.client.post(f"{api}/cache/cycle", {})
    wait_until(lambda: node.client.get(f"{api}/cache/staging")["failed"], what="the failed copy")
    wait_until(lambda: node.client.get(f"{api}/pool")["members"][0]["info"]["cache"]["groups"],
               what="the input key of the job's group in the node's heartbeat")
    return node


@pytest.fixture(scope="session")
def two_users():
    """Two real ordinary accounts, ``(usera, userb)``: see :mod:`tests.users`."""
    from tests.users import users_or_skip

    return users_or_skip()


@pytest.fixture
def tmpfs(tmp_path):
    """``tmpfs(size_bytes)`` mounts a small tmpfs (a disk that fills up) and returns its path."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mounts = []

    def make(size: int) -> Path:
        path = tmp_path / f"tmpfs{len(mounts)}"
        path.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "htda-test", str(path)], check=True)
        mounts.append(path)
        return path

    yield make
    for path in mounts:
        subprocess.run(["umount", "-l", str(path)], check=False)

"""Fixtures for the HTCondor side: a live locator, a submit agent, a coordinator that records
what it is sent (the REST contract, signature checked)."""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path

import pytest

from htda.node.client import Client
from testkit.fakes import RecordingCoordinator
from testkit.nodes import SECRET

from .kit import Hooks, agent_sections, agent_socket, install_hooks, shared_dir, write_hook_config


@pytest.fixture(scope="session")
def socket_dir():
    """Where the tests' agents put their sockets: root's, 0755, like /run/htda."""
    path = shared_dir("htda-run-")
    yield path
    shutil.rmtree(path, ignore_errors=True)


_SOCKETS = itertools.count()


@pytest.fixture
def sockets(socket_dir):
    """``sockets(name)``: a fresh socket path in :func:`socket_dir`."""
    return lambda name="agent": str(socket_dir / f"{name}-{next(_SOCKETS)}.sock")


@pytest.fixture
def coordinator():
    recorder = RecordingCoordinator().start()
    yield recorder
    recorder.stop()


@pytest.fixture
def locator(inprocess_node):
    return inprocess_node("loc", ["locator"])


@pytest.fixture
def agent(inprocess_node, locator, coordinator, sockets):
    return inprocess_node("submit", ["submit"], seeds=[locator.url],
                          sections=agent_sections([locator.url], [coordinator.url], sockets()))


@pytest.fixture
def hook_config(tmp_path, agent):
    return write_hook_config(tmp_path / "hooks.toml", agent_socket(agent), log=str(tmp_path / "hooks.log"))


@pytest.fixture
def holdings(locator):
    """Report holdings to the locator: ``holdings({"node": {lfn: size}})``."""
    client = Client(SECRET.encode(), retries=0)

    def report(nodes: dict[str, dict[str, int]]) -> None:
        for node, files in nodes.items():
            client.post(f"{locator.url}/api/v1/locator/holdings",
                        {"node": node, "files": [{"lfn": k, "size": v} for k, v in files.items()], "replace": True})

    yield report
    client.close()


@pytest.fixture(scope="session")
def installed():
    """``installed(variant)``: the hooks as ``hooks/install-hooks [--native]`` writes them, in a root
    folder every user may reach (hooks run as the job's owner)."""
    made: dict[str, Path] = {}

    def install(variant: str) -> Path:
        if variant == "native" and not (shutil.which("cc") or shutil.which("gcc")):
            pytest.skip("no C compiler: the native hooks cannot be built here")
        if variant not in made:
            made[variant] = install_hooks(shared_dir(f"htda-hooks-{variant}-"), native=variant == "native")
        return made[variant]

    yield install
    for path in made.values():
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def native_hooks(installed):
    """The native job-router hooks, built with hooks/install-hooks --native."""
    return installed("native")


@pytest.fixture(params=["python", "native"])
def run(request):
    """``run(name, stdin, config)`` (and ``run.argv(name)``): a job-router hook, as the Python script and
    as the native program, run by root."""
    return Hooks(request.getfixturevalue("native_hooks") if request.param == "native" else None)


@pytest.fixture(params=["python", "native"])
def installed_hooks(request, installed):
    """``hooks(name, stdin, config, user)``: the installed Python and native hooks, run as ``user``."""
    return Hooks(installed(request.param))

"""Fixtures for the HTCondor side: a live locator, a submit agent, a coordinator that records
what it is sent (the REST contract, signature checked)."""

from __future__ import annotations

import pytest

from htda.node.client import Client
from htda.testing.nodes import SECRET

from .kit import RecordingCoordinator, agent_sections, write_hook_config


@pytest.fixture
def coordinator():
    recorder = RecordingCoordinator()
    recorder.server.start()
    yield recorder
    recorder.server.stop()


@pytest.fixture
def locator(inprocess_node):
    return inprocess_node("loc", ["locator"])


@pytest.fixture
def agent(inprocess_node, locator, coordinator):
    return inprocess_node("submit", ["submit"], seeds=[locator.url],
                          sections=agent_sections([locator.url], [coordinator.url]))


@pytest.fixture
def hook_config(tmp_path, agent):
    return write_hook_config(tmp_path / "hooks.toml", agent.url, log=str(tmp_path / "hooks.log"))


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

"""Shared fixtures: real nodes on loopback ports, torn down after each test."""

from __future__ import annotations

import pytest

from htda.node.client import Client
from testkit.nodes import SECRET, NodeProcess, free_port, start_inprocess, write_config


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


@pytest.fixture
def node_factory(tmp_path):
    """Start ``htda-node`` subprocesses: ``node_factory(name, components, seeds=None, sections=None)``.

    The first node started without seeds becomes its own seed.  All nodes
    share one secret and are stopped at teardown.
    """
    started: list[NodeProcess] = []

    def make(name: str, components: list[str], seeds: list[str] | None = None,
             sections: dict | None = None, start: bool = True, **pool) -> NodeProcess:
        proc = NodeProcess(_config(tmp_path, name, components, seeds, sections, pool))
        started.append(proc)
        return proc.start() if start else proc

    yield make
    for proc in started:
        proc.stop()


@pytest.fixture
def inprocess_node(tmp_path):
    """Start a :class:`htda.node.runtime.Node` in this process (faster, no kill)."""
    nodes = []

    def make(name: str, components: list[str], seeds: list[str] | None = None, sections: dict | None = None,
             **pool):
        node = start_inprocess(_config(tmp_path, name, components, seeds, sections, pool))
        nodes.append(node)
        return node

    yield make
    for node in nodes:
        node.stop()


@pytest.fixture(scope="session")
def two_users():
    """Two real ordinary accounts, ``(usera, userb)``: see :mod:`tests.users`."""
    from tests.users import users_or_skip

    return users_or_skip()

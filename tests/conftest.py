"""Shared fixtures: real nodes on loopback ports, torn down after each test."""

from __future__ import annotations

import pytest

from htda.testing.nodes import NodeProcess, free_port, start_inprocess, write_config


@pytest.fixture
def node_factory(tmp_path):
    """Start ``htda-node`` subprocesses: ``node_factory(name, components, seeds=None, sections=None)``.

    The first node started without seeds becomes its own seed.  All nodes
    share one secret and are stopped at teardown.
    """
    started: list[NodeProcess] = []

    def make(name: str, components: list[str], seeds: list[str] | None = None,
             sections: dict | None = None, start: bool = True, **pool) -> NodeProcess:
        port = free_port()
        url = f"{pool.get('scheme', 'http')}://127.0.0.1:{port}"
        config = write_config(tmp_path, name, components, port, seeds if seeds is not None else [url],
                              sections=sections, **pool)
        proc = NodeProcess(config)
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
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        config = write_config(tmp_path, name, components, port, seeds if seeds is not None else [url],
                              sections=sections, **pool)
        node = start_inprocess(config)
        nodes.append(node)
        return node

    yield make
    for node in nodes:
        node.stop()

"""Pool membership with real ``htda-node`` processes on loopback ports."""

import time

import pytest

from testkit.nodes import wait_until

INTERVAL, EXPIRY = 0.5, 2.5


@pytest.fixture
def three_nodes(node_factory):
    seed = node_factory("seed", ["coordinator", "locator"], heartbeat_interval=INTERVAL, expiry=EXPIRY)
    a = node_factory("worker-a", ["cache"], seeds=[seed.url], heartbeat_interval=INTERVAL, expiry=EXPIRY)
    b = node_factory("worker-b", ["cache"], seeds=[seed.url], heartbeat_interval=INTERVAL, expiry=EXPIRY)
    return seed, a, b


def everyone_sees(nodes, names):
    return all(n.members() == names for n in nodes)


def test_nodes_discover_each_other_through_one_seed_within_two_intervals(three_nodes):
    seed, a, b = three_nodes
    names = {"seed", "worker-a", "worker-b"}
    started = time.monotonic()
    wait_until(lambda: everyone_sees(three_nodes, names), timeout=10, what="full membership")
    # all three were up (healthy) before this point; discovery needs one round to the seed and one back
    assert time.monotonic() - started <= 2 * INTERVAL + 0.5
    roles = {m["name"]: m["roles"] for m in a.get("/api/v1/pool")["members"]}
    assert roles == {"seed": ["coordinator", "locator"], "worker-a": ["cache"], "worker-b": ["cache"]}


def test_killed_node_is_dropped_after_expiry_and_returns_after_restart(three_nodes):
    seed, a, b = three_nodes
    names = {"seed", "worker-a", "worker-b"}
    wait_until(lambda: everyone_sees(three_nodes, names), timeout=10, what="full membership")
    b.kill()
    killed = time.monotonic()
    wait_until(lambda: everyone_sees([seed, a], {"seed", "worker-a"}), timeout=EXPIRY + 5, what="worker-b dropped")
    gone_after = time.monotonic() - killed
    assert EXPIRY - 2 * INTERVAL <= gone_after <= EXPIRY + 2 * INTERVAL + 1.0
    b.start()
    wait_until(lambda: everyone_sees(three_nodes, names), timeout=2 * INTERVAL + 3, what="worker-b back")


def test_seed_restart_relearns_the_pool_from_heartbeats(three_nodes):
    seed, a, b = three_nodes
    names = {"seed", "worker-a", "worker-b"}
    wait_until(lambda: everyone_sees(three_nodes, names), timeout=10, what="full membership")
    seed.kill()
    seed.start()
    # the seed kept no state: it learns both workers again from their next heartbeats
    wait_until(lambda: seed.members() == names, timeout=2 * INTERVAL + 3, what="seed relearns the pool")


def test_graceful_shutdown_on_sigterm(node_factory):
    node = node_factory("polite", ["locator"])
    assert node.stop() == 0
    log = node.log.read_text()
    assert "received SIGTERM, shutting down" in log and "polite" in log

"""Connections that never finish their request hold no worker: /healthz answers and the pool stays whole."""

import pytest

from tests.bench_scripts import load_bench_script


@pytest.fixture(scope="module")
def bench():
    return load_bench_script("halfopen_bench.py", "halfopen_bench")


#: a probe that waited for a held worker would take the header deadline (5 s); a loaded CI machine (6 test
#: workers on 2 cores) has delayed a healthy probe past 1 s
SLOWEST_PROBE = 2.0


#: the share of its connections the attack must hold on average for the run to count: the attacker's own TLS
#: handshakes are slow on a loaded CI machine (117 of 200 held on average there, the server unharmed: p99 0.23 s)
HELD_SHARE = 0.5


def assert_unharmed(fig: dict, connections: int) -> None:
    assert fig["held_mean"] > HELD_SHARE * connections, f"the attack did not hold its connections: {fig}"
    assert fig["failures"] == 0 and fig["max"] < SLOWEST_PROBE, f"/healthz was slow or silent: {fig}"
    assert not fig["member_dropped"], f"the pool lost its member: {fig}"


def test_400_half_open_connections_neither_delay_healthz_nor_drop_members(bench):
    # longer than the member's expiry (3 s): a seed that stopped answering heartbeats would drop it
    fig = bench.run(400, seconds=6.0, tls=False, kinds=bench.KINDS)
    assert_unharmed(fig, 400)
    assert fig["reopened"] > 0  # the seed did drop the stalled connections (header deadline)


def test_half_open_tls_handshakes_do_not_stall_the_acceptor(bench):
    fig = bench.run(200, seconds=5.0, tls=True, kinds=("idle", "hello", "headers", "keepalive"))
    assert_unharmed(fig, 200)

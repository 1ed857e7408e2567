"""The coordinator component on a node whose clock only the test moves: releases that run out, the first-read
wait, storage reads that expire, cache nodes that leave the pool.  Requests go through the real REST layer; a
cycle runs when a test asks for one (``POST /cycle``), and time passes only when a test advances the clock."""

from __future__ import annotations

import pytest

from htda.protocol import paths
from testkit.clock import FakeClock
from testkit.nodes import heartbeat

RELEASE_TTL, FIRST_READ_WAIT, EXPIRY = 600.0, 60.0, 3.0
INPUTS = [f"/store/run1/f{k}.root" for k in range(3)]


@pytest.fixture
def clocked(inprocess_node, signed):
    """(node, clock, call): a coordinator whose own cycles are an hour apart, and a signed caller of its API."""
    clock = FakeClock()

    def make(**options):
        node = inprocess_node("coord", ["coordinator"], clock=clock, expiry=EXPIRY, sections={"coordinator": {
            "cycle": 3600.0, "half_life": 3600.0, "access_on": "start", "release_ttl": RELEASE_TTL, **options}})

        def call(path: str, body: dict | None = None):
            return signed.get(node.url + path) if body is None else signed.post(node.url + path, body)

        return node, call

    return make, clock


def _start_jobs(call, clock: FakeClock, jobs: int = 2) -> None:
    """``jobs`` jobs reading INPUTS, recorded without a submit time (the coordinator's clock stamps them) and
    started now."""
    call(paths.JOBS, {"jobs": [{"job_id": f"s#1.{i}", "owner": "alice", "inputs": INPUTS,
                                "sizes": dict.fromkeys(INPUTS, 1000)} for i in range(jobs)]})
    call(paths.EVENTS, {"events": [{"job_id": f"s#1.{i}", "state": "started", "time": clock.time()}
                                   for i in range(jobs)]})


def _cycle(node, call, signed) -> dict | None:
    """w1 heartbeats (so it stays a live cache member however far the clock moved), then one cycle."""
    heartbeat(signed, node.url, "w1", ["cache"], info={"cache": {"capacity_bytes": 10_000, "free_bytes": 10_000,
                                                                  "used_bytes": 0, "files": 0, "staging": 0}})
    return call(paths.CYCLE, {})["cycle"]


def _assigned(call) -> set[str]:
    return {f["lfn"] for f in call(paths.ASSIGNMENTS.format(node="w1"))["files"]}


def test_a_released_file_stays_off_the_node_for_the_release_ttl_of_the_coordinators_clock(clocked, signed):
    make, clock = clocked
    node, call = make()
    _start_jobs(call, clock)
    assert _cycle(node, call, signed)["placed"] == 3 and _assigned(call) == set(INPUTS)
    assert call(paths.RELEASES, {"node": "w1", "lfns": [INPUTS[0]], "reason": "disk full"}) == {"released": 1}
    _cycle(node, call, signed)
    assert _assigned(call) == set(INPUTS[1:])
    clock.advance(RELEASE_TTL - 1)
    _cycle(node, call, signed)
    assert _assigned(call) == set(INPUTS[1:])
    clock.advance(2)
    _cycle(node, call, signed)
    assert _assigned(call) == set(INPUTS)


def test_a_new_group_nobody_reads_is_placed_once_the_first_read_wait_is_over(clocked, signed):
    make, clock = clocked
    node, call = make(first_read_wait=FIRST_READ_WAIT)
    _start_jobs(call, clock)
    assert _cycle(node, call, signed)["placed"] == 0  # no job reads it yet: wait for a reader's node
    clock.advance(FIRST_READ_WAIT - 1)
    assert _cycle(node, call, signed)["placed"] == 0
    clock.advance(2)
    assert _cycle(node, call, signed)["placed"] == 3 and _assigned(call) == set(INPUTS)


def test_storage_reads_count_for_their_ttl_and_go_with_a_cache_node_that_leaves(clocked, signed):
    make, clock = clocked
    node, call = make()
    _start_jobs(call, clock, jobs=1)
    _cycle(node, call, signed)
    call(paths.READS, {"node": "w1", "lfns": INPUTS[:1], "ttl": 30.0})
    assert call(paths.READS)["nodes"] == {"w1": INPUTS[:1]}
    clock.advance(29)
    assert call(paths.READS)["nodes"] == {"w1": INPUTS[:1]}
    clock.advance(2)
    assert call(paths.READS)["nodes"] == {}
    call(paths.READS, {"node": "w1", "lfns": INPUTS[:1], "ttl": 30.0})
    clock.advance(EXPIRY + 0.1)  # w1 falls silent: once the pool drops it, its reads no longer count
    assert "w1" not in {m.name for m in node.members()}
    assert call(paths.READS)["nodes"] == {}
    assert call(paths.CYCLE, {})["cycle"] is None  # no live cache node: the placement is kept as it is


@pytest.mark.parametrize("facts", [{"capacity_bytes": -1}, {"capacity_bytes": True}, {"capacity_bytes": 1 << 62},
                                   {"capacity_bytes": 0}, {"staging": "many"}, {"files": None}])
def test_a_cache_member_whose_facts_do_not_fit_gets_no_files(clocked, signed, facts):
    make, _ = clocked
    node, _ = make()
    fitting = {"capacity_bytes": 10_000, "free_bytes": 10_000, "used_bytes": 0, "files": 0, "staging": 0}
    heartbeat(signed, node.url, "w1", ["cache"], info={"cache": fitting})
    heartbeat(signed, node.url, "w2", ["cache"], info={"cache": {**fitting, **facts}})
    assert [n.name for n in node.components["coordinator"].cache_nodes()] == ["w1"]


def test_the_adaptive_shadows_model_a_cache_of_the_placed_groups(clocked, signed):
    make, clock = clocked
    node, call = make()
    _start_jobs(call, clock)  # one group of three files
    call(paths.JOBS, {"jobs": [{"job_id": "s#2.0", "owner": "alice", "inputs": ["/store/run2/f0.root"],
                                "sizes": {"/store/run2/f0.root": 1000}}]})
    call(paths.EVENTS, {"events": [{"job_id": "s#2.0", "state": "started", "time": clock.time()}]})
    assert _cycle(node, call, signed) is not None
    assert node.components["coordinator"].core.state.policy.capacity == 2

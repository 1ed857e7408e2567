"""Background loops and what they say about their health (``/healthz``), on a fake clock."""

from __future__ import annotations

import json
import logging

import pytest

from htda.node.periodic import FAILING_AFTER, Periodic
from htda.protocol.paths import HEALTHZ
from testkit.clock import FakeClock
from testkit.http import raw as raw_request


@pytest.fixture
def loop():
    """A started loop whose thread waits a day before its first pass: the test runs the passes itself."""
    clock, outcomes = FakeClock(), []

    def work():
        if outcomes and outcomes.pop(0) == "raise":
            raise RuntimeError("database is locked")

    periodic = Periodic("htda-test", 10.0, work, logging.getLogger("test"), first_delay=86400.0,
                        stale_after=60.0, clock=clock)
    periodic.start()
    yield periodic, clock, outcomes
    periodic.stop(timeout=2)


def test_a_loop_is_ok_until_no_pass_completes_for_its_stale_time(loop):
    periodic, clock, _ = loop
    assert periodic.health().state == "ok"  # just started
    clock.advance(61)
    assert periodic.health().state == "stale"  # hung before its first pass
    assert periodic.run_once()
    health = periodic.health()
    assert health.ok and health.last_ok_ago == 0.0
    clock.advance(59)
    assert periodic.health().ok
    clock.advance(2)
    stale = periodic.health()
    assert stale.state == "stale" and "no pass completed for 61 s" in stale.detail


def test_a_loop_is_failing_only_after_several_passes_in_a_row_failed(loop):
    periodic, clock, outcomes = loop
    outcomes.extend(["raise"] * FAILING_AFTER)
    for _ in range(FAILING_AFTER - 1):
        assert not periodic.run_once()
        assert periodic.health().ok  # one bad pass is not a sick node
    assert not periodic.run_once()
    failing = periodic.health()
    assert failing.state == "failing" and "RuntimeError: database is locked" in failing.detail
    assert periodic.run_once()  # it recovers
    assert periodic.health().ok


def test_a_loop_whose_thread_ended_is_stopped(loop):
    periodic, _, _ = loop
    periodic.stop(timeout=2)
    assert periodic.health().state == "stopped"


def test_healthz_answers_503_naming_a_stale_loop_until_it_completes_a_pass(inprocess_node):
    """The node's /healthz on a fake clock: the locator's sweeper, first due in an hour, is stale once no pass
    completed for its stale time (three intervals, plus the first delay), and healthy again after one pass."""
    clock = FakeClock()
    node = inprocess_node("probe", ["locator"], clock=clock, sections={"locator": {"sweep_interval": 3600.0}})
    assert raw_request("GET", node.url + HEALTHZ)[0] == 200
    (sweeper,) = node.component("locator").loops()
    clock.advance(sweeper.stale_after - 1)
    assert raw_request("GET", node.url + HEALTHZ)[0] == 200
    clock.advance(2)
    status, body = raw_request("GET", node.url + HEALTHZ)
    health = json.loads(body)
    assert status == 503 and health["status"] == "unhealthy"
    assert health["problems"] == [f"htda-locator-sweep: stale (no pass completed for {sweeper.stale_after + 1:.0f} "
                                  "s (one every 3600 s expected))"]
    assert health["loops"]["htda-locator-sweep"]["state"] == "stale"
    assert sweeper.run_once()
    assert raw_request("GET", node.url + HEALTHZ)[0] == 200

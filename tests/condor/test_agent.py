"""The submit agent on a node whose clock only the test moves: the lookup's time budget across locators, the time
its events carry, and their delivery to the first coordinator that takes them.  Locators and the coordinator
are the shared stand-ins (:mod:`testkit.fakes`); the hooks' channel is the real UNIX socket."""

from __future__ import annotations

import time

import pytest

from htda.condor.hooks import EVENTS_PATH, ask_agent
from htda.node.client import ClientError
from htda.node.rest import HTTPError, Request
from htda.protocol import locator
from testkit.clock import FakeClock
from testkit.fakes import StandIn
from testkit.nodes import free_port
from tests.condor.kit import job_ad

LOOKUP_TIMEOUT = 2.0


class Locators:
    """Two locator stand-ins: ``busy`` answers 503 after ``busy_for`` seconds of the test's clock, ``good``
    answers that nobody holds anything; ``asked`` names them in the order they were asked."""

    def __init__(self, clock: FakeClock):
        self.clock, self.busy_for, self.asked = clock, 0.0, []
        self.busy = StandIn({locator.LOOKUP: self._busy}).start()
        self.good = StandIn({locator.LOOKUP: self._good}).start()

    def _busy(self, request: Request) -> dict:
        self.asked.append("busy")
        self.clock.advance(self.busy_for)
        raise HTTPError(503, "too busy")

    def _good(self, request: Request) -> dict:
        self.asked.append("good")
        return {"files": {lfn: [] for lfn in request.data.lfns}, "nodes": {}}

    def stop(self) -> None:
        self.busy.stop()
        self.good.stop()


@pytest.fixture
def agent(inprocess_node, coordinator, sockets):
    """(agent, clock, locators, coordinator, socket): a submit agent whose own sends are an hour apart; its first
    coordinator URL has nobody listening."""
    clock, socket = FakeClock(), sockets()
    locators = Locators(clock)
    node = inprocess_node("submit1", ["submit"], clock=clock, sections={"submit": {
        "socket": socket, "locators": [locators.busy.url, locators.good.url], "lookup_timeout": LOOKUP_TIMEOUT,
        "coordinators": [f"http://127.0.0.1:{free_port()}", coordinator.url], "send_interval": 3600.0}})
    yield node.component("submit"), clock, locators, coordinator, socket
    locators.stop()


def test_a_lookup_asks_the_next_locator_only_while_its_time_lasts(agent):
    submit, _, locators, _, _ = agent
    locators.busy_for = LOOKUP_TIMEOUT + 0.5  # the first locator uses up the whole budget
    with pytest.raises(ClientError):
        submit.lookup(["/a"])
    assert locators.asked == ["busy"]
    assert submit.lookup(["/a"]) == {"files": {"/a": []}, "nodes": {}}  # the next lookup starts at the other
    locators.busy_for = LOOKUP_TIMEOUT - 1.0  # time is left once the busy one refused: the next is asked
    assert submit.lookup(["/a"]) == {"files": {"/a": []}, "nodes": {}}
    assert locators.asked == ["busy", "good", "busy", "good"]


def test_events_carry_the_agents_clock_and_go_to_the_first_coordinator_that_takes_them(agent):
    submit, clock, _, coordinator, socket = agent
    settings = {"socket": socket, "agent_user": "condor"}
    status, _ = ask_agent(settings, f"{EVENTS_PATH}?hook=update", job_ad(JobStatus="2").encode(),
                          time.monotonic() + 10)
    assert status == 200
    assert coordinator.events == []  # queued: the sender's next pass is an hour away
    submit.flush()  # the first coordinator does not answer: the next one takes the batch
    assert [(e["job_id"], e["state"], e["time"]) for e in coordinator.events] == [
        ("submit.example.org#4711.3", "started", clock.time())]

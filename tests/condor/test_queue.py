"""The schedd's queue of steered jobs as the homes read it (:mod:`htda.condor.queue`)."""

from __future__ import annotations

from htda.condor.homes import Homes
from htda.condor.queue import parse_queue
from testkit.clock import FakeClock


def line(*fields: str) -> str:
    return "\t".join(fields)


def test_running_jobs_count_where_they_run_idle_ones_where_they_were_steered():
    text = "\n".join([
        line("submit.example#12.0#1795756207", "2", "w1,w2", "w3", "slot1@w3.example"),  # ran off its preference
        line("submit.example#12.1#1795756207", "2", "w1", "undefined", "slot2@w4.example"),  # no node attribute
        line("submit.example#13.0#1795756208", "1", "w1,w2", "undefined", "undefined"),
        line("submit.example#14.0#1795756209", "1", "undefined", "undefined", "undefined"),  # steered nowhere
        line("submit.example#15.0#1795756209", "2", "w1", "undefined", "undefined"),  # running where? unknown
        "a line of another shape",
        line("#16.0#1", "1", "w1", "undefined", "undefined"),
    ])
    assert parse_queue(text) == {"submit.example#12.0": {"w3": 1.0}, "submit.example#12.1": {"w4": 1.0},
                                 "submit.example#13.0": {"w1": 0.5, "w2": 0.5}}
    assert parse_queue("") == {}


def test_the_queue_ends_the_jobs_it_no_longer_holds_but_not_those_routed_while_it_was_read():
    clock = FakeClock()
    h = Homes(ttl=3600.0, window=300.0, clock=clock)
    h.routed("s#1.0", ["w1"])
    h.routed("s#2.0", ["w1"])
    clock.advance(5.0)
    asked = clock.monotonic()
    h.routed("s#3.0", ["w2"])  # while condor_q runs
    clock.advance(1.0)
    h.reconcile({"s#2.0": {"w2": 1.0}, "s#9.0": {"w2": 0.5, "w3": 0.5}}, asked_at=asked)
    assert h.jobs() == 3  # 1.0 ended; 2.0 runs on w2; 3.0 kept; 9.0 (routed by another agent) counted
    assert h.choose(["/new"], ["w1", "w2", "w3"]) == "w1"  # w1 has no job left, w2 has 2, w3 a half

"""Fail-open in the real pool: whatever the agent does, the job is routed unchanged and runs."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

import pytest

from htda.condor.hooks import load_settings
from tests.condor.kit import StubbornServer

from .pool import changes
from .test_routing import HTCONDOR_CHANGES, INPUTS, route

pytestmark = pytest.mark.slow

# The site recipe in docs/htcondor.rst (run once routed), and the test's own go-ahead: a routed job
# could otherwise start and leave the queue (a claim reused at once) before its routed ad is read.
WAITS = "(MY.HTDA_Routed =?= true) && (MY.TestMayRun =?= true)"
ROUTE_SETS = {"HTDA_Routed", "HTDA_RoutedTime"}  # the route's own SET/EVALSET, after any hook
ROUNDING = 1.5  # HTDA_RoutedTime is whole seconds; the hook's interpreter start-up on a loaded machine


#: what a fake agent answers: not an answer; HTDA's attribute with a job attribute that is not HTDA's
#: to change (the job would run /bin/false); an HTDA attribute HTCondor cannot parse
ANSWERS = {"garbage": b"this is not an ad\n",
           "foreign-attribute": b'HTDA_CacheAffinity = 1.0\nCmd = "/bin/false"\n',
           "bad-htda-expression": b"HTDA_CacheAffinity = ][ (\n"}


@contextlib.contextmanager
def failing_agent(htda_pool, failure: str) -> Iterator[None]:
    """The agent ``down`` (its node killed; its socket stays), or a fake agent on another socket:
    ``hanging``, or answering one of :data:`ANSWERS`."""
    if failure == "down":
        htda_pool.agent.kill()
        try:
            yield
        finally:
            htda_pool.restart_agent()
        return
    delay = 30.0 if failure == "hanging" else 0.0
    socket = htda_pool.sockets / f"fake-{failure}.sock"
    with StubbornServer(delay=delay, body=ANSWERS.get(failure, b""), content_type="text/plain", socket=str(socket)):
        try:
            with htda_pool.hooks_pointed_at(socket):
                yield
        finally:
            socket.unlink()


# bad-htda-expression: an HTDA attribute HTCondor cannot parse would make the real router drop the job from
# routing for good ('Failed to insert ... ignoring invalid hook output'); the hooks refuse it and fail open.
@pytest.mark.parametrize("failure", ["down", "hanging", "garbage", "foreign-attribute", "bad-htda-expression"])
def test_job_is_routed_unchanged_in_time_and_runs(htda_pool, hooks, failure):
    owner = htda_pool.owners[0]
    pool = htda_pool.pool
    period = float(pool.tool("condor_config_val", "JOB_ROUTER_POLLING_PERIOD").stdout)
    deadline = float(load_settings(str(htda_pool.settings))["timeout"])
    with failing_agent(htda_pool, failure):
        routed = route(htda_pool, owner, list(INPUTS), requirements=WAITS, timeout=deadline + 2 * period + 5)
    try:
        assert set(changes(routed.before, routed.after, HTCONDOR_CHANGES | {"HTDA_Disable"})) == ROUTE_SETS
        took = int(routed.after["HTDA_RoutedTime"]) - math.floor(routed.released)
        assert took <= deadline + period + ROUNDING, f"routed {took}s after it was let through"
        pool.tool("condor_qedit", routed.job, "TestMayRun", "true", user=owner)
        done = pool.wait_finished(routed.job)
    finally:
        pool.remove(routed.job, owner)
    assert done["JobStatus"] == "4" and done["ExitCode"] == "0"

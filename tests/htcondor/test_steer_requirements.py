"""``steer_requirements`` and ``steer_timeout`` with the real negotiator (docs/htcondor.rst): a steered
job waits for a node holding its inputs while another slot is free, and takes any slot once it has
waited ``steer_timeout`` seconds since submission."""

from __future__ import annotations

import pytest

from testkit.nodes import wait_until

from .pool import job_description
from .test_negotiation import idle_slots, ran_on

pytestmark = pytest.mark.slow

INPUTS = {"/store/htda-test/run4/e.root": 6000, "/store/htda-test/run4/f.root": 6000}
WAITS_FOR_ROUTING = "(MY.HTDA_Routed =?= true)"  # the site recipe: run once routed
BLOCKS_FOR = 12  # seconds the holder's only slot is taken


def started_after_submission(ad: dict[str, str]) -> int:
    """Seconds from the job's submission to the start of the run that completed it."""
    return int(ad["JobCurrentStartDate"]) - int(ad["QDate"])


def test_a_job_waits_for_its_busy_holder_while_another_slot_is_free(htda_pool):
    pool, owner, other = htda_pool.pool, htda_pool.owners[0], htda_pool.owners[1]
    htda_pool.report_holdings({"w1": INPUTS, "w2": {}})
    idle_slots(pool)
    blocker = pool.submit(other, {**job_description(requirements='TARGET.HTDA_NodeName == "w1"'),
                                  "executable": "/bin/sleep", "arguments": str(BLOCKS_FOR)})
    try:
        wait_until(lambda: (ad := pool.job(blocker)) is None or ad.get("JobStatus") == "2", timeout=60,
                   interval=0.5, what="the blocker to run on w1")
        with htda_pool.agent_configured(steer_requirements=True, steer_timeout=300.0):
            job = pool.submit(owner, job_description(list(INPUTS), requirements=WAITS_FOR_ROUTING))
            try:
                done = pool.wait_finished(job, timeout=120)
            finally:
                pool.remove(job, owner)
        blocked = pool.wait_finished(blocker)
    finally:
        pool.remove(blocker, other)
    assert "HTDA_CacheAffinity > 0.0" in done["Requirements"] and "HTDA_UserRequirements" in done
    assert ran_on(blocked) == "w1" and ran_on(done) == "w1"  # not the free w2
    assert int(done["JobCurrentStartDate"]) >= int(blocked["CompletionDate"])


def test_after_the_timeout_a_job_whose_holder_has_no_slot_runs_anywhere(htda_pool):
    pool, owner = htda_pool.pool, htda_pool.owners[0]
    timeout = 15.0
    htda_pool.report_holdings({"w9": INPUTS, "w1": {}, "w2": {}})  # a cache node without a startd
    idle_slots(pool)
    with htda_pool.agent_configured(steer_requirements=True, steer_timeout=timeout):
        job = pool.submit(owner, job_description(list(INPUTS), requirements=WAITS_FOR_ROUTING))
        try:
            done = pool.wait_finished(job, timeout=120)
        finally:
            pool.remove(job, owner)
    assert '"w9"' in done["HTDA_CacheAffinity"] and "HTDA_CacheAffinity > 0.0" in done["Requirements"]
    assert ran_on(done) in {"w1", "w2"}
    # it waited out the timeout (both slots free all along), and not much longer: a few negotiation cycles
    assert timeout <= started_after_submission(done) <= timeout + 20

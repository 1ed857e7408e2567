"""Claim reuse with steered jobs (docs/htcondor.rst, caveats): when a steered job ends, the schedd starts
the same user's next job steered to that node on the same claim at once, without waiting for a
negotiation cycle.  It does so only if the new job's ``Rank`` of the claimed slot is at least the rank
recorded when the slot was claimed; HTDA's ``Rank`` once fell to 0 on every claimed slot, so every
steered job waited for the next cycle (on the cluster benchmark 1.5-3.5 s per slot turnover; with
HTCondor's default ``NEGOTIATOR_INTERVAL`` up to a minute)."""

from __future__ import annotations

import pytest

from .pool import job_description
from .test_negotiation import idle_slots, ran_on

pytestmark = pytest.mark.slow

INPUTS = {"/store/htda-test/reuse/a.root": 6000, "/store/htda-test/reuse/b.root": 6000}
WAITS_FOR_ROUTING = "(MY.HTDA_Routed =?= true)"  # the site recipe: run once routed


@pytest.mark.parametrize("steer_requirements", [True, False], ids=["required", "ranked"])
def test_the_next_steered_job_reuses_the_claim(htda_pool, steer_requirements):
    pool, owner = htda_pool.pool, htda_pool.owners[0]
    htda_pool.report_holdings({"w1": INPUTS, "w2": {}})
    idle_slots(pool)
    # w1 is the only holder and has one core: the second job waits there for the first one's claim
    requirements = f'{WAITS_FOR_ROUTING} && TARGET.HTDA_NodeName == "w1"'
    description = {**job_description(list(INPUTS), requirements=requirements),
                   "executable": "/bin/sleep", "arguments": "3"}
    with htda_pool.agent_configured(steer_requirements=steer_requirements, steer_timeout=300.0):
        jobs = [pool.submit(owner, description) for _ in range(2)]
        try:
            first, second = (pool.wait_finished(job, timeout=120) for job in jobs)
        finally:
            for job in jobs:
                pool.remove(job, owner)
    assert ran_on(first) == ran_on(second) == "w1" and "HTDA_CacheAffinity" in second["Rank"]
    switched = pool.tail("SchedLog", 400, having=f"switching to job {jobs[1]}")
    assert switched, f"no claim reuse for {jobs[1]}:\n{pool.tail('SchedLog', 20, having='relinquish')}"
    assert int(second["JobCurrentStartDate"]) - int(first["CompletionDate"]) <= 2

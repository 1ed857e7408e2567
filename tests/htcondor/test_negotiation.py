"""The real negotiator with the shipped NEGOTIATOR_PRE_JOB_RANK: a job goes to the startd whose node
holds its input files, although the default expression prefers the other, smaller slot; a job
without HTDA attributes goes where the default expression sends it."""

from __future__ import annotations

import classad2
import pytest

from htda.protocol.coordinator import input_key
from testkit.nodes import wait_until

from .pool import job_description, write_hooks_settings
from .test_routing import classad

pytestmark = pytest.mark.slow

INPUTS = {"/store/htda-test/run2/x.root": 5000, "/store/htda-test/run2/y.root": 5000}
WAITS_FOR_ROUTING = "(MY.HTDA_Routed =?= true)"  # the site recipe in docs/htcondor.rst: run once routed
#: HTCondor's default NEGOTIATOR_PRE_JOB_RANK (condor_negotiator, 25.x)
DEFAULT = "(10000000 * My.Rank) + (1000000 * (RemoteOwner =?= UNDEFINED)) - (100000 * Cpus) - Memory"


def idle_slots(pool) -> dict[str, dict[str, str]]:
    """The machine ads once both startds are unclaimed with their whole slot free (as the collector
    sees them, which is what the negotiator sees)."""
    def idle():
        slots = pool.slots()
        free = all(ad.get("State") == '"Unclaimed"' and ad.get("Cpus") == "1" for ad in slots.values())
        return slots if free and len(slots) == len(pool.startds) else None

    return wait_until(idle, timeout=60, interval=1, what="both startds unclaimed in the collector")


def ran_on(ad: dict[str, str]) -> str:
    """The startd (``STARTD_NAME``) a finished job ran on: ``slot1_1@w1@host`` -> ``w1``."""
    return ad["LastRemoteHost"].strip('"').split("@")[1]


def default_choice(slots: dict[str, dict[str, str]], job: dict[str, str]) -> str:
    """The startd HTCondor's default PRE_JOB_RANK puts first for ``job``."""
    expr, target = classad2.ExprTree(DEFAULT), classad(job)
    ranks = {name: expr.eval(scope=classad(ad), target=target) for name, ad in slots.items()}
    return max(ranks, key=ranks.get)


def test_the_holders_startd_gets_the_job(htda_pool):
    pool, owner = htda_pool.pool, htda_pool.owners[0]
    htda_pool.report_holdings({"w1": INPUTS, "w2": {}})
    slots = idle_slots(pool)
    job = pool.submit(owner, job_description(list(INPUTS), requirements=WAITS_FOR_ROUTING))
    try:
        done = pool.wait_finished(job)
    finally:
        pool.remove(job, owner)
    assert done["ExitCode"] == "0"
    assert ran_on(done) == "w1" and done["MachineAttrHTDA_NodeName0"] == '"w1"'
    assert default_choice(slots, done) == "w2"  # without HTDA's term it would have run on w2


def test_with_htcondors_default_pre_job_rank_the_jobs_rank_alone_does_not_steer(htda_pool):
    """The control: the same steered job, the negotiator with HTCondor's default expression, goes
    to the smaller slot (docs/htcondor.rst: the job's Rank only breaks exact ties)."""
    pool, owner = htda_pool.pool, htda_pool.owners[0]
    htda_pool.report_holdings({"w1": INPUTS, "w2": {}})
    with pool.knobs("negotiator", NEGOTIATOR_PRE_JOB_RANK=DEFAULT):
        idle_slots(pool)
        job = pool.submit(owner, job_description(list(INPUTS), requirements=WAITS_FOR_ROUTING))
        try:
            done = pool.wait_finished(job)
        finally:
            pool.remove(job, owner)
    assert '"w1"' in done["HTDA_CacheAffinity"] and "HTDA_CacheAffinity" in done["Rank"]
    assert ran_on(done) == "w2"


def test_a_job_without_htda_attributes_matches_as_without_htda(htda_pool):
    pool, owner = htda_pool.pool, htda_pool.owners[1]
    slots = idle_slots(pool)
    job = pool.submit(owner, job_description())
    try:
        done = pool.wait_finished(job)
    finally:
        pool.remove(job, owner)
    assert done["ExitCode"] == "0"
    assert not {name for name in done if name.startswith("HTDA_")} - {"HTDA_Routed", "HTDA_RoutedTime"}
    assert ran_on(done) == default_choice(slots, done) == "w2"


def test_a_job_follows_a_copy_made_after_it_was_routed(htda_pool, cached_node):
    """No node held the inputs when the job was routed (the locator knows no copy of them): its Rank still
    prefers a machine whose cache node holds its whole input set, as the startd cron publishes it
    (``HTDA_CacheGroups``, ended with ``- update:true`` just after the list changed).  Here w1's cron asks a
    real cache node that copied the files."""
    pool, owner = htda_pool.pool, htda_pool.owners[0]
    w1 = next(s for s in pool.startds if s.name == "w1")
    key = input_key(cached_node.lfns)
    try:
        # the startds' own updates every 300 s (HTCondor's default): only the cron's "- update:true" brings the
        # new list to the collector within the wait
        with pool.knobs(None, "STARTD.UPDATE_INTERVAL = 300\n"):
            idle_slots(pool)
            write_hooks_settings(w1.settings, node=cached_node.url)
            wait_until(lambda: key in pool.slots().get("w1", {}).get("HTDA_CacheGroups", ""), timeout=30,
                       interval=1, what="w1's machine ad to list the job's input key")
        slots = idle_slots(pool)
        job = pool.submit(owner, job_description(cached_node.lfns, requirements=WAITS_FOR_ROUTING))
        try:
            done = pool.wait_finished(job)
        finally:
            pool.remove(job, owner)
    finally:  # w1 back to its own node, as the other tests expect its ad
        write_hooks_settings(w1.settings, node=htda_pool.workers["w1"].url)
        wait_until(lambda: pool.slots().get("w1", {}).get("HTDA_NodeName") == '"w1"', timeout=60, interval=1,
                   what="w1's machine ad to name w1 again")
    assert done["ExitCode"] == "0" and done["HTDA_InputKey"] == f'"{key}"' and done["HTDA_PreferredNodes"] == '""'
    assert ran_on(done) == "w1"
    assert default_choice(slots, done) == "w2"  # without HTDA's term it would have run on w2

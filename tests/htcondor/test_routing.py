"""The real job router runs HTDA's installed hooks (Python and native) on a user's job."""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass

import classad2
import pytest

from htda.condor.queue import ScheddQueue
from htda.condor.tool import CondorTool
from htda.node.client import Client
from testkit.nodes import SECRET, wait_until

from .pool import changes, job_description

pytestmark = pytest.mark.slow

INPUTS = {"/store/htda-test/run1/a.root": 300, "/store/htda-test/run1/b.root": 100}
NEVER_RUNS = '(MY.HTDA_Routed =?= true) && (TARGET.HTDA_NodeName =?= "no-such-node")'
# What HTCondor itself changes in an idle job's ad between two reads: condor_q's clock, and the
# negotiator's and schedd's bookkeeping of failed matches.
HTCONDOR_CHANGES = {"ServerTime", "LastRejMatchReason", "LastRejMatchTime", "LastRejMatchNegotiator",
                    "AutoClusterId", "AutoClusterAttrs"}
# What the hook may change besides HTDA_* (docs/htcondor.rst, "What the translate hook writes").
HOOK_MAY_CHANGE = {"Rank", "JobMachineAttrs"}
LOG = logging.getLogger("test-routing")


def classad(ad: dict[str, str]) -> classad2.ClassAd:
    """A ClassAd of ``{attribute: expression}`` (as condor_q/condor_status print them)."""
    return classad2.parseOne("\n".join(f"{k} = {v}" for k, v in ad.items()), classad2.ParserType.Old)


@dataclass
class Routed:
    """A job the route took: its id, its ad before and after, and when it was let through (epoch)."""

    job: str
    before: dict[str, str]
    after: dict[str, str]
    released: float


def route(htda_pool, owner, inputs: list[str], requirements: str = NEVER_RUNS, timeout: float = 30.0,
          **attributes: str) -> Routed:
    """Submit a job the route skips (``HTDA_Disable``), read its ad, then let the route take it."""
    pool = htda_pool.pool
    job = pool.submit(owner, job_description(inputs, requirements=requirements, HTDA_Disable="true",
                                             **attributes))
    before = pool.job(job)
    assert before is not None and "HTDA_Routed" not in before
    released = time.time()
    pool.tool("condor_qedit", job, "HTDA_Disable", "false", user=owner)
    try:
        after = wait_until(lambda: (ad := pool.job(job)) and "HTDA_Routed" in ad and ad, timeout=timeout,
                           interval=0.5, what=f"the route to edit job {job}")
    except TimeoutError as exc:
        pool.remove(job, owner)
        raise AssertionError(f"{exc}; JobRouterLog:\n{pool.tail('JobRouterLog', 12, f'src={job},')}") from None
    return Routed(job, before, after, released)


def test_routed_job_carries_htdas_steering_and_nothing_else(htda_pool, hooks):
    """The router ran the installed hook as the job's owner, the hook reached the agent, and the
    edited job differs from the submitted one in HTDA's attributes only."""
    owner = htda_pool.owners[0]
    htda_pool.report_holdings({"w1": INPUTS, "w2": {"/store/htda-test/run1/a.root": 300}})
    routed = route(htda_pool, owner, list(INPUTS), Rank="TARGET.Memory")
    job, before, after = routed.job, routed.before, routed.after
    try:
        changed = changes(before, after, HTCONDOR_CHANGES | {"HTDA_Disable"})
        assert {n for n in changed if not n.startswith("HTDA_")} <= HOOK_MAY_CHANGE, changed
        assert {"HTDA_Routed", "HTDA_RoutedTime", "HTDA_PreferredNodes", "HTDA_CacheAffinity", "Rank"} <= set(changed)
        assert all(old is None for name, (old, _) in changed.items() if name.startswith("HTDA_")), changed
        assert after["HTDA_PreferredNodes"] == '"w1,w2"'
        assert after["HTDA_UserRank"] == before["Rank"] == "TARGET.Memory"
        assert "HTDA_NodeName" in after["JobMachineAttrs"]
    finally:
        htda_pool.pool.remove(job, owner)
    assert_affinity_term(htda_pool, after, {"w1": 1.0, "w2": 0.75})


def assert_affinity_term(htda_pool, job: dict[str, str], expected: dict[str, float]) -> None:
    """The job's affinity against the real machine ads, and the pool's PRE_JOB_RANK puts the
    best holder first although its slot is the larger one (which the default expression avoids)."""
    pool = htda_pool.pool
    slots = {name: classad(ad) for name, ad in pool.slots().items()}
    ad = classad(job)
    affinity = {name: ad.lookup("HTDA_CacheAffinity").eval(scope=ad, target=slot) for name, slot in slots.items()}
    assert affinity == expected
    pre_job_rank = classad2.ExprTree(pool.tool("condor_config_val", "NEGOTIATOR_PRE_JOB_RANK").stdout.strip())
    ranks = {name: pre_job_rank.eval(scope=slot, target=ad) for name, slot in slots.items()}
    assert max(ranks, key=ranks.get) == max(expected, key=expected.get), ranks
    assert slots["w1"]["Memory"] > slots["w2"]["Memory"]


def reschedules(url: str) -> dict[str, int]:
    """The agent's ``htda_submit_reschedules_total`` samples: ``{outcome: count}``."""
    text = Client(SECRET.encode(), retries=0).text(f"{url}/metrics")
    return {outcome: int(float(value)) for outcome, value in
            re.findall(r'^htda_submit_reschedules_total\{outcome="(\w+)"\} (\S+)$', text, re.MULTILINE)}


def test_after_steering_the_agent_asks_the_real_schedd_to_reschedule(htda_pool, tmp_path):
    """condor_reschedule as the agent runs it (root, the pool's CONDOR_CONFIG) is taken by the schedd; with a
    CONDOR_CONFIG that leads nowhere it fails, is counted, and the job is steered all the same."""
    pool, owner = htda_pool.pool, htda_pool.owners[0]
    tool = tmp_path / "condor_reschedule"  # the tool acts on its argv[0]: a link of that name, as installed
    tool.symlink_to(pool.program("condor_reschedule"))
    htda_pool.report_holdings({"w1": INPUTS, "w2": {}})
    nowhere = tmp_path / "no_pool_config"
    nowhere.write_text("COLLECTOR_HOST = 127.0.0.1:9\nSCHEDD_HOST = nowhere\n")
    for config, outcome in ((pool.config, "ok"), (nowhere, "failed")):
        with htda_pool.agent_configured(reschedule_command=[str(tool)], condor_config=str(config)) as agent:
            routed = route(htda_pool, owner, list(INPUTS))
            try:
                assert routed.after["HTDA_PreferredNodes"] == '"w1"'
                counted = wait_until(lambda: reschedules(agent.url) or None, timeout=30, interval=0.5,
                                     what="the agent's reschedule after steering")
            finally:
                pool.remove(routed.job, owner)
        assert counted == {outcome: 1}


def test_the_schedds_queue_names_the_nodes_each_steered_job_waits_for(htda_pool, tmp_path):
    """``condor_q`` as the agent reads it for first-read homes (htda.condor.queue): a routed idle job is shared
    among its preferred nodes; once removed it is gone."""
    pool, owner = htda_pool.pool, htda_pool.owners[0]
    tool = tmp_path / "condor_q"
    tool.symlink_to(pool.program("condor_q"))
    queue = ScheddQueue(CondorTool([str(tool)], str(pool.config), what="queue", fallback="-", log=LOG))
    htda_pool.report_holdings({"w1": INPUTS, "w2": INPUTS})
    routed = route(htda_pool, owner, list(INPUTS))  # NEVER_RUNS: it stays idle
    try:
        assert routed.after["HTDA_PreferredNodes"] == '"w1,w2"'
        seen = queue.read()
        assert seen is not None
        ours = {job: shares for job, shares in seen.items() if job.endswith(f"#{routed.job}")}
        assert list(ours.values()) == [{"w1": 0.5, "w2": 0.5}], seen
    finally:
        pool.remove(routed.job, owner)

    def gone() -> bool:
        now = queue.read()
        return now is not None and not any(job.endswith(f"#{routed.job}") for job in now)

    wait_until(gone, timeout=30, interval=0.5, what="the removed job to leave the queue")

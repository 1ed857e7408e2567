"""The shipped NEGOTIATOR_PRE_JOB_RANK and the job Rank the translate hook writes, evaluated with HTCondor's
ClassAd code as the negotiator does (matchmaker.cpp, HTCondor 25.x).

For one job the negotiator evaluates, per candidate slot, NEGOTIATOR_PRE_JOB_RANK (MY = slot, TARGET = job),
the job's Rank (MY = job, TARGET = slot) and NEGOTIATOR_POST_JOB_RANK, and takes the slot that is best by
(pre-job rank, job Rank, post-job rank, preemption state: 2 idle > 1 rank preemption > 0 priority
preemption).  The pre- and post-job ranks go through ``(float)`` (EvalNegotiatorMatchRank); the job's
Rank stays a double.  :func:`negotiate` does the same on a list of slots.
"""

from __future__ import annotations

import itertools
import re
import struct

import classad2

from htda.condor import classads
from htda.condor.hooks import apply_answer
from htda.condor.jobinfo import InputMapping
from htda.condor.translate import Steering, translate

from .kit import INPUTS, PREFIXES, ROOT, hook_input, job_ad, parse, run_hook

#: HTCondor's defaults (src/condor_utils/param_info.in, 25.x)
DEFAULT = "(10000000 * My.Rank) + (1000000 * (RemoteOwner =?= UNDEFINED)) - (100000 * Cpus) - Memory"
DEFAULT_POST = ("(RemoteOwner =?= UNDEFINED) * (ifthenElse(isUndefined(KFlops), 1000, Kflops) - SlotID "
                "- 1.0e10*(Offline=?=True))")
#: realistic slots: partitionable slots of machines up to 128 cores and 1 TB
CPUS = [1, 2, 8, 31, 64, 128]
MEMORY = [1, 2000, 64000, 500000, 1048576]
#: the preferences the translate hook is given in these tests: node -> share of the input bytes
SHARES = {"c-all": 1.0, "c-most": 0.8, "c-half": 0.5, "c-bit": 0.02}


def shipped_pre_job_rank() -> str:
    text = (ROOT / "config" / "htcondor" / "50-htda-negotiator.config").read_text()
    match = re.search(r"^NEGOTIATOR_PRE_JOB_RANK\s*=\s*(.+)$", text, re.MULTILINE)
    assert match, "the snippet sets NEGOTIATOR_PRE_JOB_RANK"
    return match.group(1).strip()


def f32(value: float) -> float:
    """What the negotiator keeps of a pre- or post-job rank: ``(float)val``."""
    return struct.unpack("f", struct.pack("f", value))[0]


def slot(node: str, cpus: int = 1, memory: int = 2000, claimed: bool = False,
         owner: str = "bob@example.org") -> classad2.ClassAd:
    ad = classad2.ClassAd({"Machine": f"{node}.example.org", "Name": f"slot1@{node}", "HTDA_NodeName": node,
                           "Cpus": cpus, "Memory": memory, "Rank": 0.0, "CurrentRank": 0.0, "SlotID": 1})
    if claimed:  # what a startd publishes while a job of ``owner`` (by default another user) runs
        ad["RemoteOwner"] = ad["RemoteUser"] = owner
    return ad


def steered_job(shares: dict[str, float] = SHARES, **changes: str) -> classad2.ClassAd:
    """The sample job as the translate hook rewrites it when the locator answers ``shares``."""
    answer = {"nodes": {node: {"fraction": share} for node, share in shares.items()}}
    mapping = InputMapping("HTDA_InputFiles", {p["prefix"]: p["lfn"] for p in PREFIXES})
    ad = job_ad(**changes)
    # every share preferred (no relative floor): these tests are about the expressions, not the choice
    out = translate(classads.parse_job(ad), mapping, Steering(relative_fraction=0.0), publish=lambda job: None,
                    lookup=lambda lfns: answer)
    assert out.changed, out.reason
    return parse(apply_answer(ad.encode(), out.text))  # what the hook prints: the job with HTDA's lines


def number(value) -> float:
    assert isinstance(value, (int, float)) and not isinstance(value, bool), value
    return float(value)


def pre(expression: str, job: classad2.ClassAd, machine: classad2.ClassAd) -> float:
    return f32(number(classad2.ExprTree(expression).eval(scope=machine, target=job)))


def job_rank(job: classad2.ClassAd, machine: classad2.ClassAd) -> float:
    return number(job.lookup("Rank").eval(scope=job, target=machine))


def negotiate(job: classad2.ClassAd, slots: list[classad2.ClassAd], pre_job_rank: str = "") -> str:
    """The slot the negotiator gives ``job`` (all slots match; claimed ones may be preempted)."""
    def key(machine: classad2.ClassAd) -> tuple:
        first = pre(pre_job_rank, job, machine) if pre_job_rank else -3.4e38  # unset: one constant
        post = f32(number(classad2.ExprTree(DEFAULT_POST).eval(scope=machine, target=job)))
        return first, job_rank(job, machine), post, 0 if "RemoteOwner" in machine else 2
    return max(slots, key=key)["Name"].split("@")[1]


# -- NEGOTIATOR_PRE_JOB_RANK ------------------------------------------------------------------------------


def test_the_reviewers_cases():
    """Issue 12 item 8: a claimed holder scored 9,999,898,000, an idle non-holder 898,000."""
    job, expression = steered_job(), shipped_pre_job_rank()
    claimed_holder = pre(expression, job, slot("c-all", claimed=True))
    idle_other = pre(expression, job, slot("c-none"))
    idle_holder = pre(expression, job, slot("c-all"))
    assert (claimed_holder, idle_other, idle_holder) == (-102000.0, 898000.0, 65898000.0)


def test_jobs_without_htda_attributes_get_exactly_the_default():
    job, expression = parse(job_ad()), shipped_pre_job_rank()
    assert expression.endswith(DEFAULT)
    for cpus, memory, claimed in itertools.product(CPUS, MEMORY, [False, True]):
        machine = slot("c-all", cpus, memory, claimed)
        assert pre(expression, job, machine) == pre(DEFAULT, job, machine)


def test_claimed_slots_score_what_the_default_gives_them_idle_ones_never_less():
    """So HTDA never makes preemption look better than an idle slot the default would take."""
    job, expression = steered_job(), shipped_pre_job_rank()
    for node, cpus, memory in itertools.product([*SHARES, "c-none"], CPUS, MEMORY):
        claimed = slot(node, cpus, memory, claimed=True)
        assert pre(expression, job, claimed) == pre(DEFAULT, job, claimed)
        idle = slot(node, cpus, memory)
        assert pre(expression, job, idle) >= pre(DEFAULT, job, idle)
        assert pre(expression, job, idle) > pre(expression, job, slot("c-all", cpus, memory, claimed=True))


def test_among_idle_slots_any_holder_beats_any_non_holder():
    job, expression = steered_job(), shipped_pre_job_rank()
    weakest = min(pre(expression, job, slot("c-bit", c, m)) for c, m in itertools.product(CPUS, MEMORY))
    strongest = max(pre(expression, job, slot("c-none", c, m)) for c, m in itertools.product(CPUS, MEMORY))
    assert weakest > strongest


def test_among_holders_more_affinity_wins():
    job, expression = steered_job(), shipped_pre_job_rank()
    # half the input bytes or more: always, whatever the slots' Cpus and Memory
    for (c1, m1), (c2, m2) in itertools.product(itertools.product(CPUS, MEMORY), repeat=2):
        assert pre(expression, job, slot("c-all", c1, m1)) > pre(expression, job, slot("c-half", c2, m2))
    # a difference d outweighs fewer than 500 * d more free Cpus: 20 % up to 99
    assert pre(expression, job, slot("c-all", 100, 64000)) > pre(expression, job, slot("c-most", 1, 64000))
    assert pre(expression, job, slot("c-all", 101, 64000)) == pre(expression, job, slot("c-most", 1, 64000))


def test_a_few_mb_still_order_slots_at_float_precision():
    job, expression = steered_job(), shipped_pre_job_rank()
    for node, cpus, memory in itertools.product(["c-all", "c-half", "c-none"], CPUS, [1, 2000, 500000]):
        step = 1 if node == "c-none" else 4  # non-holders keep the default's 1 MB
        assert pre(expression, job, slot(node, cpus, memory)) > pre(expression, job, slot(node, cpus, memory + step))
        claimed, bigger = slot(node, cpus, memory, True), slot(node, cpus, memory + 1, True)
        assert pre(expression, job, claimed) > pre(expression, job, bigger)
    # the old factor 1e10 rounded to 1,024: memory differences under 1 GB tied
    old = "(10000000000.0 * TARGET.HTDA_CacheAffinity) + " + DEFAULT
    assert pre(old, job, slot("c-all", 1, 2000)) == pre(old, job, slot("c-all", 1, 2010))


def test_affinity_from_the_job_is_clamped():
    """The job ad is the user's: a made-up affinity counts as at most 1.0, and a negative one as 0."""
    expression = shipped_pre_job_rank()
    greedy, sulky = parse(job_ad(HTDA_CacheAffinity="1e30")), parse(job_ad(HTDA_CacheAffinity="-1e30"))
    assert pre(expression, greedy, slot("c-x")) == pre(expression, steered_job(), slot("c-all"))
    assert pre(expression, sulky, slot("c-x")) == pre(DEFAULT, sulky, slot("c-x"))
    assert pre(expression, greedy, slot("c-x", claimed=True)) == pre(DEFAULT, greedy, slot("c-x", claimed=True))


# -- the whole choice: pre-job rank, then the job's Rank -------------------------------------------------


def test_the_negotiator_takes_the_idle_slot_not_the_claimed_holder():
    job = steered_job()
    slots = [slot("c-all", claimed=True), slot("c-half", claimed=True), slot("c-none")]
    assert negotiate(job, slots, shipped_pre_job_rank()) == "c-none"
    assert negotiate(job, [*slots, slot("c-bit", 128, 1048576)], shipped_pre_job_rank()) == "c-bit"
    assert negotiate(job, [*slots, slot("c-half", 64), slot("c-all", 128)], shipped_pre_job_rank()) == "c-all"


def test_where_the_default_takes_an_idle_slot_htda_does_too():
    """Whatever the slots' sizes: HTDA only ever reorders idle slots."""
    plain, job, expression = parse(job_ad()), steered_job(), shipped_pre_job_rank()
    sizes = list(itertools.product([1, 8, 64], [2000, 256000]))
    for (c1, m1), (c2, m2), node in itertools.product(sizes, sizes, SHARES):
        slots = [slot(node, c1, m1, claimed=True), slot("c-none", c2, m2)]
        if negotiate(plain, slots, DEFAULT) == "c-none":
            assert negotiate(job, slots, expression) == "c-none"
            assert negotiate(job, slots, DEFAULT) == "c-none"


def test_the_job_rank_does_not_pick_preemption_where_the_pre_job_rank_ties():
    """Pools with HTCondor's default pre-job rank: a 1-core claimed slot and an 11-core idle slot of equal
    Memory tie (-102,000 each), so the job's Rank decides; HTDA's term must not choose the claimed holder."""
    job = steered_job()
    claimed_holder, idle_other = slot("c-all", 1, 2000, claimed=True), slot("c-none", 11, 2000)
    assert pre(DEFAULT, job, claimed_holder) == pre(DEFAULT, job, idle_other)
    assert negotiate(job, [claimed_holder, idle_other], DEFAULT) == "c-none"
    # pools that rank by the job's Rank alone: idle slots first, holders first among them
    assert negotiate(job, [claimed_holder, idle_other]) == "c-none"
    assert negotiate(job, [claimed_holder, idle_other, slot("c-half", 64, 1000)]) == "c-half"


def test_job_rank_keeps_the_users_rank():
    job = steered_job(Rank="TARGET.Memory")
    assert str(job.lookup("HTDA_UserRank")) == "TARGET.Memory"
    # on idle slots: affinity first, the user's Rank among equal shares
    assert job_rank(job, slot("c-half", memory=1)) > job_rank(job, slot("c-none", memory=1048576))
    assert job_rank(job, slot("c-none", memory=4000)) > job_rank(job, slot("c-other", memory=2000))
    # on claimed slots: the user's Rank alone, as without HTDA
    assert job_rank(job, slot("c-all", memory=2000, claimed=True)) == 2000.0
    assert job_rank(job, slot("c-all")) == 1e9 + 2000.0


def test_on_the_users_own_claim_the_affinity_stays():
    """The schedd reuses a claim for the same user's next job only if that job ranks the claimed slot (now
    with ``RemoteOwner`` the user) at least as high as the job that claimed it ranked it idle; the affinity
    must therefore count there as on the idle slot, and on another user's claim still not at all."""
    job = steered_job()
    alice = job.eval("User")
    for node in SHARES:
        idle, own = slot(node), slot(node, claimed=True, owner=alice)
        assert job_rank(job, own) == job_rank(job, idle) == 1e9 * SHARES[node]
        assert job_rank(job, slot(node, claimed=True)) == 0.0
    assert job_rank(job, slot("c-none", claimed=True, owner=alice)) == 0.0


# -- end to end: the real hook through the submit agent ----------------------------------------------------


def test_cache_node_wins_with_htda_and_would_lose_with_the_default(agent, hook_config, holdings):
    holdings({"c-all": INPUTS, "c-half": {"/store/data/run1/c.root": 200}})
    job = parse(run_hook("htda_translate", hook_input(job_ad()), hook_config).stdout)
    slots = [slot("c-all", cpus=16, memory=64000), slot("c-half", cpus=8, memory=32000),
             slot("c-none", cpus=1, memory=2000), slot("c-all", cpus=1, memory=2000, claimed=True)]
    slots[-1]["Name"] = "slot2@c-all-claimed"
    assert negotiate(job, slots, DEFAULT) == "c-none"  # the default packs: fewest free Cpus/Memory first
    assert negotiate(job, slots, shipped_pre_job_rank()) == "c-all"
    assert negotiate(job, slots[1:], shipped_pre_job_rank()) == "c-half"


def test_a_node_with_a_sliver_of_the_inputs_is_not_preferred_by_default():
    answer = {"nodes": {node: {"fraction": share} for node, share in SHARES.items()}}
    mapping = InputMapping("HTDA_InputFiles", {p["prefix"]: p["lfn"] for p in PREFIXES})
    out = translate(classads.parse_job(job_ad()), mapping, Steering(), publish=lambda job: None,
                    lookup=lambda lfns: answer)
    job = parse(apply_answer(job_ad().encode(), out.text))
    assert job["HTDA_PreferredNodes"] == "c-all,c-most,c-half"  # c-bit holds 2 % against the best's 100 %

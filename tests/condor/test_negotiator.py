"""The shipped NEGOTIATOR_PRE_JOB_RANK, evaluated as the negotiator does (MY = slot, TARGET = job)."""

from __future__ import annotations

import re

import classad2

from .kit import INPUTS, ROOT, hook_input, job_ad, parse, run_hook

#: HTCondor's default (condor_negotiator, 25.x)
DEFAULT = "(10000000 * My.Rank) + (1000000 * (RemoteOwner =?= UNDEFINED)) - (100000 * Cpus) - Memory"


def shipped_pre_job_rank() -> str:
    text = (ROOT / "config" / "htcondor" / "50-htda-negotiator.config").read_text()
    match = re.search(r"^NEGOTIATOR_PRE_JOB_RANK\s*=\s*(.+)$", text, re.MULTILINE)
    assert match, "the snippet sets NEGOTIATOR_PRE_JOB_RANK"
    return match.group(1).strip()


def slot(node: str, cpus: int, memory: int) -> classad2.ClassAd:
    return classad2.ClassAd({"Machine": f"{node}.example.org", "HTDA_NodeName": node, "Cpus": cpus,
                             "Memory": memory, "Rank": 0.0})


def best(expression: str, job: classad2.ClassAd, slots: list[classad2.ClassAd]) -> str:
    expr = classad2.ExprTree(expression)
    values = {s["HTDA_NodeName"]: expr.eval(scope=s, target=job) for s in slots}
    assert all(isinstance(v, (int, float)) for v in values.values()), values
    return max(values, key=values.get)


def test_shipped_expression_keeps_the_default_after_the_affinity_term():
    assert shipped_pre_job_rank().endswith(DEFAULT)
    assert "HTDA_CacheAffinity" in shipped_pre_job_rank()


def test_cache_node_wins_with_htda_and_would_lose_with_the_default(agent, hook_config, holdings):
    holdings({"c-all": INPUTS, "c-half": {"/store/data/run1/c.root": 200}})
    job = parse(run_hook("htda_translate", hook_input(job_ad()), hook_config).stdout)
    slots = [slot("c-all", cpus=16, memory=64000), slot("c-half", cpus=8, memory=32000),
             slot("c-none", cpus=1, memory=2000)]
    assert best(DEFAULT, job, slots) == "c-none"  # the default packs: fewest free Cpus/Memory first
    assert best(shipped_pre_job_rank(), job, slots) == "c-all"
    assert best(shipped_pre_job_rank(), job, slots[1:]) == "c-half"


def test_jobs_without_htda_attributes_keep_the_default_order():
    job = parse(job_ad())
    slots = [slot("c-all", cpus=16, memory=64000), slot("c-none", cpus=1, memory=2000)]
    assert best(shipped_pre_job_rank(), job, slots) == best(DEFAULT, job, slots) == "c-none"

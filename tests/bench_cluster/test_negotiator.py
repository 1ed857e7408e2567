"""The negotiator stand-in: HTDA's shipped pre-job rank and the job's Rank, evaluated with classad2."""

from __future__ import annotations

import classad2
import pytest

from bench.cluster.dataset import DatasetFile
from bench.cluster.negotiator import DEFAULT_PRE_JOB_RANK, Negotiator, shipped_pre_job_rank
from bench.cluster.workload import Job, job_ad
from htda.condor import classads


def _ad(affinity: dict[str, float] | None = None, requirements: str | None = None) -> classad2.ClassAd:
    job = Job("submit.htda-bench#1.0", 1, 1, "alice", ("/store/a.root",), {"/store/a.root": 10})
    ad = classads.parse_job(job_ad(job, qdate=1_700_000_000))
    if affinity is not None:  # what the translate hook writes (htda/condor/translate.py)
        ad["HTDA_MachineNode"] = classad2.ExprTree(
            "ifThenElse(isUndefined(TARGET.HTDA_NodeName), TARGET.Machine, TARGET.HTDA_NodeName)")
        ad["HTDA_CacheAffinity"] = classad2.ExprTree(classads.affinity_expression(
            sorted(affinity.items(), key=lambda kv: -kv[1]), "HTDA_MachineNode"))
    if requirements:
        ad["Requirements"] = classad2.ExprTree(requirements)
    return ad


def test_the_shipped_pre_job_rank_is_used():
    text = shipped_pre_job_rank()
    assert text is not None and "HTDA_CacheAffinity" in text
    assert Negotiator(["w1"], 1, text).pre_job_rank_text == text
    assert Negotiator(["w1"], 1, None).pre_job_rank_text == DEFAULT_PRE_JOB_RANK


def test_cache_affinity_wins_and_ties_spread_over_workers():
    neg = Negotiator(["w1", "w2", "w3"], 2, shipped_pre_job_rank())
    placed = [neg.place(f"j{i}", _ad({"w3": 0.9, "w2": 0.2})).worker for i in range(4)]
    assert placed == ["w3", "w3", "w2", "w2"]  # best affinity first, then the next-best once w3 is full
    plain = [neg.place(f"p{i}", _ad()).worker for i in range(2)]
    assert plain == ["w1", "w1"]
    assert neg.place("none-left", _ad()) is None
    neg.release(neg.slots[0])
    assert neg.place("again", _ad()).worker == "w1"


def test_untranslated_jobs_are_spread_evenly():
    neg = Negotiator(["w1", "w2"], 2, shipped_pre_job_rank())
    assert [neg.place(f"j{i}", _ad()).worker for i in range(4)] == ["w1", "w2", "w1", "w2"]


def test_requirements_are_honoured():
    neg = Negotiator(["w1", "w2"], 1, shipped_pre_job_rank())
    slot = neg.place("j", _ad({"w1": 1.0}, requirements='TARGET.HTDA_NodeName == "w2"'))
    assert slot.worker == "w2"
    assert neg.place("k", _ad(requirements="TARGET.Memory > 100000")) is None


@pytest.mark.parametrize("rank, expected", [("TARGET.HTDA_NodeName == \"w2\"", "w2"), ("0", "w1")])
def test_job_rank_breaks_ties(rank, expected):
    neg = Negotiator(["w1", "w2"], 1, shipped_pre_job_rank())
    ad = _ad()
    ad["Rank"] = classad2.ExprTree(rank)
    assert neg.place("j", ad).worker == expected


def test_job_ad_parses_and_lists_inputs():
    files = [DatasetFile(f"/store/f{i}.root", "", 100 + i, 1) for i in range(3)]
    job = Job("submit.htda-bench#7.0", 7, 2, "bob", tuple(f.lfn for f in files), {f.lfn: f.size for f in files})
    ad = classads.parse_job(job_ad(job, qdate=1_700_000_000))
    assert classads.evaluate(ad, "HTDA_InputFiles") == ",".join(f.lfn for f in files)
    assert classads.evaluate(ad, "ClusterId") == 7 and classads.evaluate(ad, "Owner") == "bob"
    assert classads.evaluate(ad, "RequestDisk") == 1000

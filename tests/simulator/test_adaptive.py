"""The simulator replays the coordinator's lrfu-adaptive rating as ``--half-lives auto`` (issue 16)."""

from __future__ import annotations

import argparse
import gc
import random
import weakref

import pytest

from htda.coordinator.adaptive import LAYOUTS, LIRS, PLAIN, PROBATION, AdaptiveLRFUPolicy, sample_salt
from htda.coordinator.admission import TinyLFUAdmission
from htda.coordinator.rating import LRFUPolicy
from htda.simulator.cli import parse_duration
from htda.simulator.htda_policy import HTDAPolicy
from htda.simulator.run import AUTO, RunSpec, build_policies, htda_label, is_hindsight_label

from .helpers import chunk_of, run


def _drifting(phases: int = 10, width: int = 40, rounds: int = 15) -> list:
    """Recency-heavy: a new working set each phase, read round after round; old sets never come back."""
    return [f"p{p}-{i}" for p in range(phases) for _ in range(rounds) for i in range(width)]


def test_auto_is_a_half_life_of_the_command_line_and_a_label():
    assert parse_duration("auto") == AUTO
    assert htda_label(AUTO) == "htda(auto)" and htda_label(AUTO, "tinylfu") == "htda(auto)+tinylfu"
    policies = build_policies(RunSpec(capacities=[100], half_lives=[AUTO, 86400.0], baselines=[]))
    assert [type(p.rating).__name__ for p in policies] == ["AdaptiveLRFUPolicy", "LRFUPolicy"]
    assert policies[0].rating.capacity == 100  # its miniature caches are scaled from the cache's size
    # the coordinator's default
    assert policies[0].rating.half_lives == [300.0, 3600.0, 86400.0, 604800.0, 2592000.0]


def test_the_candidates_of_auto_are_those_given_as_the_coordinator_would_configure_them():
    """``--candidates`` replays the coordinator's ``adaptive_half_lives``; the starting 1 day is always one."""
    from htda.simulator.cli import add_parser

    spec = RunSpec(capacities=[100], half_lives=[AUTO], baselines=[], candidates=[60.0, 7200.0])
    assert build_policies(spec)[0].rating.half_lives == [60.0, 7200.0, 86400.0]
    with pytest.raises(ValueError, match="candidate half-lives must be > 0"):
        RunSpec(capacities=[100], half_lives=[AUTO], candidates=[])
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    args = parser.parse_args(["simulate", "--synthetic", "--candidates", "1h,never"])
    with pytest.raises(ValueError, match="candidate half-life 'never' is not a duration"):
        args.func(args)


def test_another_sample_seed_replays_other_groups_in_the_shadow_caches_and_may_choose_otherwise():
    """``--sample-seed``: the shadow caches of a trace of more groups than they sample (16,384) replay another
    sample, so the choice, and the hits, may differ; the keys, and every other policy, do not."""
    rng = random.Random(4)
    names, scan = [], 10**6
    for i in range(120_000):  # phases: a drifting working set, then 100 hot objects among a scan (35,000 in all)
        if (i // 10_000) % 2 == 0:
            names.append(1000 + (i // 500) * 40 + rng.randrange(60))
        elif rng.random() < 0.5:
            names.append(rng.randrange(100))
        else:
            scan += 1
            names.append(scan)
    chunk = chunk_of(names, 10)
    hits = []
    for seed in (0, 1, 0):
        spec = RunSpec(capacities=[2_000], half_lives=[AUTO], baselines=["lru"], sample_seed=seed)
        policies = build_policies(spec)
        assert policies[1].rating._sample_salt == sample_salt(seed)
        results = run(chunk, policies, 2_000, bound=False)
        assert policies[1].rating.sample_rate < 1.0 and policies[1].rating.switches > 1
        hits.append((results["lru"].hit_bytes, results["htda(auto)"].hit_bytes))
    assert hits[0] == hits[2] and hits[0][0] == hits[1][0]  # one seed, one result; LRU knows no sample
    assert hits[0][1] != hits[1][1]
    with pytest.raises(ValueError, match="sample seed must be >= 0"):
        RunSpec(capacities=[100], half_lives=[AUTO], sample_seed=-1)


def test_the_adaptive_rating_finds_the_short_half_life_in_a_replay_with_and_without_admission():
    names = _drifting()
    capacity = 40

    def htda(rating, label, admission=None):
        return HTDAPolicy(capacity, rating, label=label, admission=admission)

    def adaptive():
        return AdaptiveLRFUPolicy(half_life=100_000.0, half_lives=(10.0, 100_000.0), decision_every=200)

    auto, auto_admitted = adaptive(), adaptive()
    policies = [htda(auto, "auto"), htda(LRFUPolicy(half_life=100_000.0), "long"),
                htda(auto_admitted, "auto+tinylfu", TinyLFUAdmission(width=64, window=0.5, adaptive=False))]
    results = run(chunk_of(names), policies, capacity, bound=False)
    assert auto.half_life == 10.0 and auto.switches == 1
    assert auto_admitted.half_life == 10.0
    assert results["auto"].hits > 1.5 * results["long"].hits


def test_hindsight_replays_each_candidate_alone_beside_the_online_choice():
    """``--hindsight``: every candidate half-life in every layout, fixed; plain at 1 day is LRFU at 1 day."""
    names = _drifting()
    spec = RunSpec(capacities=[40], half_lives=[AUTO, 86400.0], baselines=[], candidates=[10.0], hindsight=True,
                   bound=False, belady=False)
    policies = build_policies(spec)
    labels = [p.label for p in policies]
    assert labels == ["htda(auto)", "htda(1d)", "htda(10s, plain)", "htda(10s, asking)", "htda(10s, probation)",
                      "htda(10s, lirs)", "htda(1d, plain)", "htda(1d, asking)", "htda(1d, probation)",
                      "htda(1d, lirs)"]
    assert all(is_hindsight_label(label) == (", " in label) for label in labels)
    results = run(chunk_of(names), policies, 40, bound=False)
    assert results["htda(1d, plain)"].hits == results["htda(1d)"].hits
    assert results["htda(10s, plain)"].hits > 1.5 * results["htda(1d, plain)"].hits  # a drifting working set
    for policy in policies[2:]:  # none switched, whatever its shadows showed
        assert policy.rating.switches == 0 and policy.rating.layout == LAYOUTS.index(policy.label[:-1].split()[-1])
    with pytest.raises(ValueError, match="give --half-lives auto"):
        RunSpec(capacities=[40], half_lives=[86400.0], hindsight=True)


def test_a_fixed_candidate_keeps_its_layout_and_half_life():
    """Sets of 20 read twice in a row, then never again: the plain shadow hits every second read, the probation
    shadow (a queue of 4) almost none; the candidate fixed on probation stays so, its shadows still scored."""
    fixed = AdaptiveLRFUPolicy.fixed(10.0, PROBATION)
    fixed.set_capacity(40)
    assert fixed.probation and fixed.layouts == (PLAIN, PROBATION)
    names = [f"p{p}-{i}" for p in range(100) for _ in range(2) for i in range(20)]
    for t, name in enumerate(names):
        fixed.access(name, float(t))
    plain, probation = fixed.candidates()
    assert plain.total > 3 * probation.total and probation.active
    assert fixed.switches == 0 and fixed.half_life == 10.0 and fixed.probation
    with pytest.raises(ValueError, match="layout must be one of 0, 1, 2, 3"):
        AdaptiveLRFUPolicy.fixed(60.0, 4)
    assert AdaptiveLRFUPolicy.fixed(60.0, LIRS).layouts == (PLAIN, LIRS)


def test_a_replayed_policy_is_freed_without_the_cycle_collector():
    """The rating calls its cache back on a switch and the cache holds the rating: the callback must not make the
    two a cycle, or a replay's tables outlive it until the collector's next full pass (RSS grew by the whole
    replay's tables on every trace of a suite replayed in one process)."""
    names = _drifting()
    rating = AdaptiveLRFUPolicy(half_life=100_000.0, half_lives=(10.0, 100_000.0), decision_every=200)
    policy = HTDAPolicy(40, rating, label="auto")
    run(chunk_of(names), [policy], 40, bound=False)
    assert rating.switches == 1  # its callback was used
    gone, rating_gone = weakref.ref(policy), weakref.ref(rating)
    gc.disable()
    try:
        del policy, rating
        assert gone() is None and rating_gone() is None
    finally:
        gc.enable()


@pytest.mark.parametrize("max_sampled", [16384, 64])
def test_tables_sized_for_the_trace_at_the_start_replay_the_same(max_sampled):
    """``objects`` (the simulator knows the count from its footprint pass) only sizes the tables, and the
    sample's arrays where the sample halves (64 of 400 groups)."""
    names = _drifting()

    def replayed(objects: int) -> tuple[float, int, float]:
        rating = AdaptiveLRFUPolicy(half_life=100_000.0, half_lives=(10.0, 100_000.0), decision_every=200,
                                    max_sampled=max_sampled)
        policy = HTDAPolicy(40, rating, label="auto", objects=objects)
        return run(chunk_of(names), [policy], 40, bound=False)["auto"].hit_bytes, rating.switches, rating.sample_rate

    sized = replayed(len(set(names)))
    assert sized == replayed(0) == replayed(3)  # too few: the tables grow as before
    assert (sized[2] < 1.0) == (max_sampled < len(set(names)))
    with pytest.raises(ValueError, match="groups must be >= 0"):
        AdaptiveLRFUPolicy().reserve(-1)

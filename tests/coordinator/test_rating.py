"""Rating policies: scores against hand-computed values, LRU-like and LFU-like limits, the group max rule."""

from __future__ import annotations

import math
import random

import pytest

from htda.coordinator.rating import (
    GIB,
    NEVER,
    LFUPolicy,
    LRFUPolicy,
    LRUPolicy,
    add_key,
    file_score,
    log_add,
    normalised_key,
)
from htda.node.plugins import load


def test_lrfu_matches_hand_computed_scores():
    # half-life 10 s; group a: accesses at t=0 and t=10 (weight 1); group b: one access at t=20 of weight 3.
    policy = LRFUPolicy(half_life=10.0)
    policy.access("a", 0.0)
    policy.access("a", 10.0)
    policy.access("b", 20.0, weight=3.0)
    # at t=30: a = 2^-3 + 2^-2 = 0.375 ; b = 3 * 2^-1 = 1.5
    assert policy.score("a", 30.0) == pytest.approx(0.375)
    assert policy.score("b", 30.0) == pytest.approx(1.5)
    # at t=10: a = 0.5 + 1 = 1.5 ; b is in the future: 3 * 2^1 = 6
    assert policy.score("a", 10.0) == pytest.approx(1.5)
    assert policy.top(2, 30.0) == [("b", pytest.approx(1.5)), ("a", pytest.approx(0.375))]
    assert policy.score("never", 30.0) == 0.0


def test_order_of_accesses_does_not_matter_and_epoch_is_only_a_reference():
    early, late = LRFUPolicy(half_life=7.0), LRFUPolicy(half_life=7.0, epoch=1.7e9)
    times = [1.7e9 + 3.0, 1.7e9 + 1.0, 1.7e9 + 20.0]
    for t in times:
        early.access("g", t)
    for t in reversed(times):
        late.access("g", t)
    expected = sum(2 ** (-(1.7e9 + 30 - t) / 7.0) for t in times)
    assert early.score("g", 1.7e9 + 30) == pytest.approx(expected)
    assert late.score("g", 1.7e9 + 30) == pytest.approx(expected)


def test_long_histories_do_not_overflow():
    policy = LRFUPolicy(half_life=1.0)
    for t in range(0, 100_000, 10):
        policy.access("g", float(t))
    assert math.isfinite(policy.key("g"))
    # the last access dominates; the ones before add 2^-10 + 2^-20 + ...
    assert policy.score("g", 99_990.0) == pytest.approx(1 / (1 - 2**-10))
    assert log_add(5000.0, 5000.0) == pytest.approx(5001.0)


def _history():
    """x: accessed often long ago; y: accessed once, recently."""
    accesses = [("x", float(t)) for t in range(0, 50)] + [("y", 1000.0)]
    return accesses


@pytest.mark.parametrize("policy_cls, half_life, expected", [
    (LRFUPolicy, 1.0, ["y", "x"]),          # short half-life: behaves like LRU
    (LRUPolicy, 1.0, ["y", "x"]),
    (LRFUPolicy, 1e9, ["x", "y"]),          # long half-life: behaves like LFU
    (LFUPolicy, 1.0, ["x", "y"]),
])
def test_lru_like_and_lfu_like_orders(policy_cls, half_life, expected):
    policy = policy_cls(half_life=half_life)
    for group, t in _history():
        policy.access(group, t)
    assert [g for g, _ in policy.top(2, 1001.0)] == expected


def test_lrfu_orders_like_lru_and_lfu_on_a_random_history():
    import random

    rng = random.Random(7)
    accesses = [(f"g{rng.randrange(30)}", rng.uniform(0, 10_000)) for _ in range(400)]
    short, long_, lru, lfu = LRFUPolicy(0.01), LRFUPolicy(1e12), LRUPolicy(0.01), LFUPolicy()
    for group, t in accesses:
        for policy in (short, long_, lru, lfu):
            policy.access(group, t)
    last = {}
    counts = {}
    for group, t in accesses:
        last[group] = max(last.get(group, 0), t)
        counts[group] = counts.get(group, 0) + 1
    assert [g for g, _ in short.top(30, 10_000)] == sorted(last, key=last.get, reverse=True)
    assert [g for g, _ in lru.top(30, 10_000)] == sorted(last, key=last.get, reverse=True)
    by_count = [counts[g] for g, _ in long_.top(30, 10_000)]
    assert by_count == sorted(counts.values(), reverse=True)
    assert [counts[g] for g, _ in lfu.top(30, 10_000)] == by_count


def test_group_max_rule_and_size_normalisation():
    policy = LRFUPolicy(half_life=10.0)
    policy.access("job1", 0.0)
    policy.access("task", 0.0)
    policy.access("task", 10.0)
    now = 10.0
    assert file_score(policy, ["job1", "task"], now) == pytest.approx(policy.score("task", now))
    assert file_score(policy, ["job1"], now) == pytest.approx(0.5)
    assert file_score(policy, [], now) == 0.0
    two_gib = file_score(policy, ["job1", "task"], now, size=2 * GIB, per_size=True)
    assert two_gib == pytest.approx(policy.score("task", now) / 2)
    assert normalised_key(policy.key("task"), None) == policy.key("task")


def test_touched_groups_are_the_incremental_work():
    policy = LRFUPolicy(half_life=10.0)
    policy.access("a", 1.0)
    policy.access("b", 1.0)
    assert policy.take_touched() == {"a", "b"}
    assert policy.take_touched() == set()
    policy.access("b", 2.0)
    assert policy.take_touched() == {"b"}


@pytest.mark.parametrize("name, cls", [("lrfu", LRFUPolicy), ("lru", LRUPolicy), ("lfu", LFUPolicy)])
def test_policies_are_entry_points(name, cls):
    assert load("htda.policies", name) is cls


def test_bad_parameters_are_refused():
    with pytest.raises(ValueError):
        LRFUPolicy(half_life=0)
    with pytest.raises(ValueError):
        LRFUPolicy().access("g", 0.0, weight=0.0)


def test_the_coordinator_and_the_simulator_rate_per_size_with_one_formula():
    from htda.coordinator.state import RatingState

    state = RatingState(LRFUPolicy(half_life=3600.0), per_size=True)
    state.add_files({1: ("/a", 0), 2: ("/b", 4 * GIB), 3: ("/c", None)})
    for fid in (1, 2, 3):
        state.file_keys[fid] = 10.0
    # a 0-byte (or unknown-size: counted as unknown_size, 1 GiB) file is one unit: neither favoured nor punished
    assert [state.file_order_key(fid) for fid in (1, 2, 3)] == [
        normalised_key(10.0, 0), normalised_key(10.0, 4 * GIB), normalised_key(10.0, GIB)] == [10.0, 8.0, 10.0]


def test_add_key_is_log_add_bit_for_bit_with_its_shortcuts():
    """The hot path's inlined log-add (with its exact shortcuts for negligible terms) gives log_add's keys."""
    rng = random.Random(5)
    keys: dict = {}
    expected: dict = {}
    values = [0.0, 52.9, 53.0, 53.1, -53.0, 1e-12, 1e6, -1e6]
    for _ in range(20_000):
        group = rng.randrange(50)
        if rng.random() < 0.02:
            keys[group] = expected[group] = NEVER  # a restored key of a group never accessed
        old = expected.get(group, NEVER)
        x = old + rng.choice(values) if old != NEVER and rng.random() < 0.5 else rng.uniform(-100.0, 100.0)
        add_key(keys, group, x)
        expected[group] = log_add(old, x)
        assert keys[group] == expected[group]  # exactly: the same bits

"""The offline bounds are never beaten: Belady's MIN on equal sizes, PFOO-L on any sizes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from htda.coordinator.rating import LRFUPolicy
from htda.simulator.htda_policy import HTDAPolicy
from htda.simulator.offline import NEVER_AGAIN, next_uses, pfoo_lower_bound
from htda.simulator.policies import ARCPolicy, LFUPolicy, LRUPolicy

from .helpers import chunk_of, run

names = st.lists(st.integers(0, 12), min_size=1, max_size=120)


def online(capacity: int) -> list:
    return [LRUPolicy(capacity), LFUPolicy(capacity), ARCPolicy(capacity),
            HTDAPolicy(capacity, LRFUPolicy(half_life=0.5), label="htda-short"),
            HTDAPolicy(capacity, LRFUPolicy(half_life=50.0), label="htda-long", accesses="request")]


@settings(max_examples=150, deadline=None)
@given(trace=names, capacity=st.integers(1, 8), group_count=st.integers(1, 4))
def test_belady_never_beaten_on_equal_sizes(trace, capacity, group_count):
    groups = {n: n % group_count for n in set(trace)}
    results = run(chunk_of(trace, groups=groups), online(capacity), capacity)
    belady, bound = results.pop("belady"), results.pop("pfoo-l")
    for label, r in results.items():
        assert r.hits <= belady.hits, label
    assert belady.hits <= bound.hits + 1e-9


@settings(max_examples=150, deadline=None)
@given(trace=names, capacity=st.integers(1, 60), sizes=st.lists(st.integers(0, 30), min_size=13, max_size=13))
def test_pfoo_bound_never_beaten_on_variable_sizes(trace, capacity, sizes):
    results = run(chunk_of(trace, dict(enumerate(sizes))), online(capacity), capacity)
    bound = results.pop("pfoo-l")
    for label, r in results.items():  # Belady included: with variable sizes it is only a feasible schedule
        assert r.hits <= bound.hits + 1e-9, label
        assert r.hit_bytes <= bound.hit_bytes + 1e-6, label


def test_bound_grows_with_capacity_and_reaches_every_reuse():
    trace = chunk_of(list("ABCABCDDAB"), {"A": 3, "B": 5, "C": 2, "D": 9})
    small = run(trace, [], 5)["pfoo-l"]
    large = run(trace, [], 100)["pfoo-l"]
    assert small.hit_bytes < large.hit_bytes
    assert large.hits == 6  # every request but the four first ones
    assert large.hit_bytes == 3 + 5 + 2 + 9 + 3 + 5


@settings(max_examples=100, deadline=None)
@given(trace=st.lists(st.integers(0, 9), max_size=80), block=st.integers(1, 9))
def test_next_uses_in_blocks_match_a_plain_scan(trace, block):
    expected, later = [], {}
    for i in range(len(trace) - 1, -1, -1):
        expected.append(later.get(trace[i], NEVER_AGAIN))
        later[trace[i]] = i
    assert next_uses(np.asarray(trace, dtype=np.int64), block=block).tolist() == expected[::-1]


def test_bucketed_bound_is_close_to_the_exact_knapsack():
    rng = np.random.default_rng(3)
    ids = rng.zipf(1.3, size=5000) % 300
    sizes = (rng.integers(1, 1000, size=300))[ids]
    nexts = next_uses(ids)
    starts = np.flatnonzero(nexts != NEVER_AGAIN)
    lengths = (nexts[starts] - starts).astype(float)
    s = sizes[starts].astype(float)
    capacity = 20_000
    order = np.argsort(lengths, kind="stable")
    spent = np.cumsum((s * lengths)[order])
    full = int(np.searchsorted(spent, capacity * len(ids), side="right"))
    exact = s[order][:full].sum() + (capacity * len(ids) - spent[full - 1]) / lengths[order][full]
    bound = pfoo_lower_bound(ids, sizes, [capacity], nexts, block=777)[0]
    assert exact <= bound.hit_bytes <= exact * 1.002
    assert bound.hit_bytes_series.sum() == pytest.approx(bound.hit_bytes)

"""The offline bounds are never beaten: Belady's MIN on equal sizes, PFOO-L on any sizes."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from htda.coordinator.rating import LRFUPolicy
from htda.simulator.htda_policy import HTDAPolicy
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

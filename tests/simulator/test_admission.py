"""HTDA's policy with the coordinator's admission filter in a replay: scans of objects read once."""

from __future__ import annotations

import random

from htda.coordinator.admission import TinyLFUAdmission
from htda.coordinator.rating import LRFUPolicy
from htda.simulator.htda_policy import HTDAPolicy

from .helpers import chunk_of, run


def _scan_polluted(hot: int = 20, rounds: int = 60, scan: int = 30, seed: int = 3) -> list:
    """A hot set read round after round, each round followed by a scan of ``scan`` objects never read again."""
    rng = random.Random(seed)
    names: list = []
    for r in range(rounds):
        order = list(range(hot))
        rng.shuffle(order)
        names += [f"hot{i}" for i in order]
        names += [f"scan{r}-{i}" for i in range(scan)]
    return names


def _htda(capacity: int, admission: TinyLFUAdmission | None) -> HTDAPolicy:
    # half-life of 10 requests (the trace's clock is the request number): recency-heavy, nearly LRU
    label = "admitted" if admission is not None else "rating alone"
    return HTDAPolicy(capacity, LRFUPolicy(half_life=10.0), label=label, admission=admission)


def test_admission_beats_the_rating_alone_on_a_scan_polluted_workload():
    names = _scan_polluted()
    capacity = 25  # the hot set fits, with room to spare, but not beside a scan
    admission = TinyLFUAdmission(width=64, window=0.1, adaptive=False)
    results = run(chunk_of(names), [_htda(capacity, None), _htda(capacity, admission)], capacity, bound=False)
    alone, admitted = results["rating alone"], results["admitted"]
    hot_requests = 20 * 60
    assert alone.hits < 0.1 * hot_requests  # each scan flushes the hot set: an LRU-like rating keeps nothing
    assert admitted.hits > 0.8 * hot_requests  # scan objects (seen once) lose to the hot ones (seen every round)
    for policy in (alone, admitted):
        assert policy.hits <= hot_requests  # scan objects are never hit


def test_admission_keeps_capacity_and_churn_balanced():
    sizes = {n: 1 + n % 7 for n in range(50)}
    rng = random.Random(5)
    names = [min(rng.randrange(50), rng.randrange(50)) for _ in range(3000)]
    policy = _htda(20, TinyLFUAdmission(width=64, window=0.2))
    results = run(chunk_of(names, sizes), [policy], capacity=20)
    assert 0 <= policy.used <= 20 and policy.window_used <= policy.used
    assert policy.staged - policy.evicted == policy.used
    assert 0 < results["admitted"].hits
    assert results["admitted"].hit_bytes <= results["pfoo-l"].hit_bytes  # the bound holds it too

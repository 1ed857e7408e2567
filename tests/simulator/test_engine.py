"""The replay engine's bookkeeping, multi-node runs and the coordinator-history trace."""

from __future__ import annotations

import pytest

from htda.simulator.engine import replay, windows_of
from htda.simulator.generator import AnalysisWorkload
from htda.simulator.policies import LRUPolicy
from htda.simulator.run import RunSpec, htda_label, simulate


def test_series_add_up_to_totals_and_windows_are_exact():
    workload = AnalysisWorkload(requests=10_000, seed=5, chunk_size=3000)
    cuts = [len(c) for c in windows_of(workload.chunks(), 2500)]
    assert cuts == [2500] * 4
    spec = RunSpec(capacities=[int(0.2 * workload.working_set_bytes())], half_lives=[600.0])
    result = simulate(workload.chunks(), spec, window=1000)
    assert result.requests == 10_000 and result.requests_series == [1000] * 10
    assert sum(result.bytes_series) == result.bytes
    for r in result.results:
        assert sum(r.hit_bytes_series) == pytest.approx(r.hit_bytes), r.label
        assert result.fetched(r) == pytest.approx(result.bytes - r.hit_bytes)
        assert 0 <= result.byte_hit_ratio(r) <= 1


def test_nodes_split_the_baselines_and_place_htda():
    workload = AnalysisWorkload(requests=20_000, seed=6)
    capacity = int(0.2 * workload.working_set_bytes())
    spec = RunSpec([capacity], [300.0], ["lru"], belady=False, bound=False)
    one = {r.label: r for r in simulate(workload.chunks(), spec).results}
    spec.nodes = 4
    four = {r.label: r for r in simulate(workload.chunks(), RunSpec(**vars(spec) | {"cycle": None})).results}
    assert set(four) == {"lru", "htda(5m) placed"}  # several nodes: HTDA runs with the coordinator's placement
    assert 0 < four["lru"].hits <= one["lru"].hits * 1.05  # four small caches are no better than one big one
    assert four["htda(5m) placed"].hits > 0


def test_history_of_a_coordinator_database(tmp_path):
    from htda.coordinator.store import JobRecord, Store
    from htda.simulator.history import HistoryTrace

    url = f"sqlite:///{tmp_path / 'coord.db'}"
    store = Store(url)
    jobs = [JobRecord(f"j{i}", "alice", ["/d/a", "/d/b"] if i % 2 else ["/d/c"], task="t1" if i % 2 else None,
                      sizes={"/d/a": 10, "/d/b": 20}) for i in range(6)]
    store.ingest_jobs(jobs)
    store.record_events([{"job_id": f"j{i}", "state": "started", "time": 100.0 + i} for i in range(6)])
    store.close()
    trace = HistoryTrace(url, unknown_size=7)
    assert trace.requests() == 9
    chunk = next(iter(trace.chunks()))
    assert chunk.times.tolist() == sorted(chunk.times.tolist())
    assert sorted(set(chunk.sizes.tolist())) == [7, 10, 20]  # /d/c has no size: unknown_size
    assert len(set(chunk.groups.tolist())) == 2  # the task t1, and the input group of /d/c
    result = replay(trace.chunks(), [LRUPolicy(100)])
    assert result.results[0].hits == 9 - 3  # everything fits: only the three first reads miss
    trace.close()


def test_labels():
    assert [htda_label(h) for h in (300, 3600, 86400, 90.5)] == ["htda(5m)", "htda(1h)", "htda(1d)", "htda(90.5s)"]
    with pytest.raises(ValueError):
        RunSpec(capacities=[])

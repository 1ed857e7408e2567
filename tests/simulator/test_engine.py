"""The replay engine's bookkeeping, multi-node runs and the coordinator-history trace."""

from __future__ import annotations

import os
import signal
import time
import tracemalloc
import uuid
from dataclasses import replace

import numpy as np
import pytest

from htda.simulator.engine import replay, windows_of
from htda.simulator.generator import AnalysisWorkload
from htda.simulator.policies import CachePolicy, LRUPolicy
from htda.simulator.run import AUTO, RunSpec, build_policies, htda_label, simulate
from htda.simulator.trace import NO_GROUP


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


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def coordinator_db(request, tmp_path):
    """``(url, schema)``: a SQLite file, or a fresh schema of the PostgreSQL server (dropped after)."""
    import sqlalchemy

    from htda.coordinator.store import with_driver

    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'coord.db'}", None
        return
    url, schema = "postgresql://postgres@127.0.0.1:5432/test", f"htda_sim_{uuid.uuid4().hex[:12]}"
    engine = sqlalchemy.create_engine(with_driver(url))
    try:
        engine.connect().close()
    except sqlalchemy.exc.OperationalError as exc:
        pytest.skip(f"PostgreSQL at {url} unreachable: {str(exc).splitlines()[0]}")
    yield url, schema
    with engine.begin() as conn:
        conn.execute(sqlalchemy.text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
    engine.dispose()


def test_history_of_a_coordinator_database(coordinator_db):
    from htda.coordinator.store import JobRecord, Store
    from htda.simulator.history import HistoryTrace

    url, schema = coordinator_db
    store = Store(url, schema=schema)
    jobs = [JobRecord(f"j{i}", "alice", ["/d/a", "/d/b"] if i % 2 else ["/d/c"], task="t1" if i % 2 else None,
                      sizes={"/d/a": 10, "/d/b": 20}, submit_time=50.0) for i in range(6)]
    store.ingest_jobs(jobs)
    store.record_events([{"job_id": f"j{i}", "state": "started", "time": 100.0 + i} for i in range(6)])
    store.record_events([{"job_id": "j1", "state": "started", "time": 200.0}])  # a duplicate counts once
    store.close()
    trace = HistoryTrace(url, unknown_size=7, schema=schema, access_on="start")
    assert trace.requests() == 9
    chunk = next(iter(trace.chunks()))
    assert chunk.times.tolist() == [100.0, 101.0, 101.0, 102.0, 103.0, 103.0, 104.0, 105.0, 105.0]
    assert sorted(set(chunk.sizes.tolist())) == [7, 10, 20]  # /d/c has no size: unknown_size
    assert len(set(chunk.groups.tolist())) == 2  # the task t1, and the input group of /d/c
    result = replay(trace.chunks(), [LRUPolicy(100)])
    assert result.results[0].hits == 9 - 3  # everything fits: only the three first reads miss
    trace.close()
    by_submit = HistoryTrace(url, unknown_size=7, schema=schema)  # the coordinator's default: job records count
    assert by_submit.requests() == 9
    chunk = next(iter(by_submit.chunks()))
    assert chunk.times.tolist() == sorted(chunk.times.tolist()) and set(chunk.times.tolist()) == {50.0}
    by_submit.close()


def test_labels():
    assert [htda_label(h) for h in (300, 3600, 86400, 90.5)] == ["htda(5m)", "htda(1h)", "htda(1d)", "htda(90.5s)"]
    with pytest.raises(ValueError):
        RunSpec(capacities=[])


def test_each_policy_in_turn_over_a_trace_read_again_gives_the_same_results():
    """Given a way to read the trace again, each policy replays all of it before the next starts (its tables stay
    in the CPU's caches): the same hits, series and churn as chunk by chunk, and the trace read once more than
    there are policies (the first pass keeps the series and the offline bounds' ids)."""
    workload = AnalysisWorkload(requests=30_000, seed=4, chunk_size=4000)
    spec = RunSpec(capacities=[workload.footprint_bytes() // 10, workload.footprint_bytes() // 3],
                   half_lives=[AUTO, 3600.0], baselines=["lru", "s3fifo", "wtinylfu"])
    reads = []

    def again():
        reads.append(1)
        return workload.chunks()

    progress = []
    by_chunk = simulate(workload.chunks(), spec, window=3000)
    in_turn = simulate(again, spec, window=3000, progress=lambda done, what: progress.append(what))
    assert len(reads) == 1 + 2 * 5  # once, then once per online policy (two sizes of five), not for the bounds
    assert [r.label for r in in_turn.results] == [r.label for r in by_chunk.results]
    for a, b in zip(by_chunk.results, in_turn.results):
        assert (a.hits, a.hit_bytes, a.staged, a.evicted) == (b.hits, b.hit_bytes, b.staged, b.evicted)
        assert a.hit_bytes_series == b.hit_bytes_series and a.hits_series == b.hits_series
    assert all(len(r.hits_series) == 10 for r in in_turn.results if not r.bound)
    assert in_turn.requests_series == by_chunk.requests_series and in_turn.objects == by_chunk.objects
    assert progress[0] == "reading" and "htda(auto)" in progress


def test_policies_replayed_in_forked_processes_give_the_same_results_in_the_same_order():
    workload = AnalysisWorkload(requests=30_000, seed=5, chunk_size=4000)
    spec = RunSpec(capacities=[workload.footprint_bytes() // 10, workload.footprint_bytes() // 3],
                   half_lives=[AUTO, 3600.0], baselines=["lru", "s3fifo", "wtinylfu"])
    done: list[float] = []
    alone = simulate(workload.chunks, spec, window=3000)
    forked = simulate(workload.chunks, replace(spec, jobs=3), window=3000,
                      progress=lambda requests, what: done.append(requests) if what == "policies" else None)
    assert [r.label for r in forked.results] == [r.label for r in alone.results]
    for a, b in zip(alone.results, forked.results):
        assert (a.hits, a.hit_bytes, a.staged, a.evicted, a.capacity) == (b.hits, b.hit_bytes, b.staged, b.evicted,
                                                                          b.capacity)
        assert a.hit_bytes_series == b.hit_bytes_series and a.hits_series == b.hits_series
        assert b.bound or b.cpu_seconds > 0  # each policy's own CPU time, measured where it ran
    assert done == sorted(done) and done[-1] == forked.requests  # one step a policy, the last at the end
    assert len(done) == 10  # five policies at two sizes


def test_a_failure_in_a_forked_replay_reaches_the_caller():
    workload = AnalysisWorkload(requests=5_000, seed=6, chunk_size=1000)
    policies = [LRUPolicy(1000), Failing(1000)]
    with pytest.raises(RuntimeError, match="replay failed"):
        replay(workload.chunks, policies, release=True, jobs=2)


def test_a_forked_replay_that_dies_is_an_error_not_a_wait_for_ever():
    workload = AnalysisWorkload(requests=5_000, seed=6, chunk_size=1000)
    policies = [LRUPolicy(1000), Killed(1000), LRUPolicy(2000)]
    with pytest.raises(RuntimeError, match="died before its end"):
        replay(workload.chunks, policies, release=True, jobs=2)


def test_an_error_in_one_forked_replay_ends_the_replay_at_once_and_kills_the_policies_still_replaying(tmp_path):
    workload = AnalysisWorkload(requests=5_000, seed=6, chunk_size=1000)
    pid_file = tmp_path / "slow.pid"

    class Slow(LRUPolicy):
        def replay(self, times, ids, sizes, groups):
            pid_file.write_text(str(os.getpid()))
            time.sleep(120)
            return super().replay(times, ids, sizes, groups)

    class FailingOnceSlowRuns(LRUPolicy):
        def replay(self, times, ids, sizes, groups):
            for _ in range(200):  # (once the slow policy's process replays, so that there is one to kill)
                if pid_file.exists() and pid_file.read_text():
                    break
                time.sleep(0.05)
            raise ValueError("not a replay error: a defect")

    started = time.monotonic()
    with pytest.raises(ValueError, match="a defect"):
        replay(workload.chunks, [Slow(1000), FailingOnceSlowRuns(1000), LRUPolicy(2000)], release=True, jobs=2)
    assert time.monotonic() - started < 60
    with pytest.raises(ProcessLookupError):  # (killed and reaped)
        os.kill(int(pid_file.read_text()), 0)


class Killed(LRUPolicy):
    """A policy whose process is killed while it replays (as the kernel's OOM killer would)."""

    parent = os.getpid()  # the test's own process, which must not be the one killed

    def replay(self, times, ids, sizes, groups):
        if os.getpid() == self.parent:
            raise AssertionError("replayed in the test's own process, not a forked one")
        os.kill(os.getpid(), signal.SIGKILL)


class Failing(LRUPolicy):
    """A policy whose replay fails (in whichever process replays it)."""

    def replay(self, times, ids, sizes, groups):
        raise RuntimeError("replay failed")


def test_a_released_policy_keeps_its_totals_and_refuses_to_replay():
    """``release=True`` (what ``simulate`` asks): each policy's tables go once its totals are taken, the same
    results as keeping them; a released policy used again fails at once instead of replaying from nothing."""
    workload = AnalysisWorkload(requests=10_000, seed=6, chunk_size=2000)
    spec = RunSpec(capacities=[workload.footprint_bytes() // 10], half_lives=[AUTO],
                   baselines=["lru", "arc", "s3fifo", "wtinylfu"], belady=False, bound=False)
    kept, released = build_policies(spec), build_policies(spec)
    a = replay(workload.chunks, kept)
    b = replay(workload.chunks, released, release=True)
    assert [(r.label, r.hit_bytes, r.staged, r.evicted) for r in a.results] == \
        [(r.label, r.hit_bytes, r.staged, r.evicted) for r in b.results]
    for before, after in zip(kept, released):
        assert (after.label, after.used, after.staged, after.evicted) == \
            (before.label, before.used, before.staged, before.evicted)
        assert set(vars(after)) <= CachePolicy.KEPT_AFTER_RELEASE < set(vars(before))
        with pytest.raises(AttributeError):
            after.replay([0.0], [1], [1], [NO_GROUP])


def test_htda_reserves_its_tables_at_its_first_request_not_when_built():
    """A run builds every policy before replaying them in turn: HTDA's tables, sized for the trace's objects,
    are made at a policy's first request, so that building five sizes of it for a trace of millions of objects
    does not hold five sets of them at once."""
    spec = RunSpec(capacities=[1_000, 10_000, 100_000], half_lives=[AUTO], baselines=[], belady=False, bound=False,
                   objects=200_000)
    tracemalloc.start()
    try:
        policies = build_policies(spec)
        built = tracemalloc.get_traced_memory()[0]
        one = np.zeros(1)
        policies[0].replay(one, one.astype(np.int64), one.astype(np.int64) + 1, np.full(1, NO_GROUP))
        replaying = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert built < 2**20 and replaying > 10 * 2**20  # (200,000 files and groups: tens of MB)


def test_hits_do_not_depend_on_where_the_trace_is_cut_into_chunks():
    """The time series' window re-cuts the trace: every policy, with the admission filter's hill climbing too (its
    sample once restarted at each chunk), hits the same bytes however it is cut."""
    workload = AnalysisWorkload(requests=20_000, seed=5)
    spec = RunSpec(capacities=[workload.footprint_bytes() // 50, workload.footprint_bytes() // 10],
                   half_lives=[AUTO, 3600.0], admissions=["none", "tinylfu"],
                   baselines=["lru", "lfu", "arc", "s3fifo", "wtinylfu"], belady=False, bound=False)
    cuts = [simulate(workload.chunks(), spec, window=window) for window in (7, 1000, 20_000)]
    hits = [[(r.label, r.capacity, r.hit_bytes, r.staged, r.evicted) for r in cut.results] for cut in cuts]
    assert hits[0] == hits[1] == hits[2]
    assert any(label.endswith("+tinylfu") for label, *_ in hits[0])


def test_a_damaged_history_is_refused_by_what_is_wrong(tmp_path):
    import sqlite3

    from htda.coordinator.store import JobRecord, Store
    from htda.simulator.history import HistoryTrace

    url = f"sqlite:///{tmp_path / 'coordinator.db'}"
    store = Store(url)
    store.ingest_jobs([JobRecord("j1", "alice", ["/d/a"], sizes={"/d/a": 10}, submit_time=50.0)])
    store.close()
    with sqlite3.connect(tmp_path / "coordinator.db") as db:
        db.execute("UPDATE htda_files SET size = -5")
    trace = HistoryTrace(url)
    with pytest.raises(ValueError, match="history .* is damaged: file 1 is -5 bytes, read at time 50.0"):
        list(trace.chunks())
    trace.close()

"""Read-ahead (:mod:`htda.cache.readahead`): files read through storage in the order asked, each once per
``recent`` seconds, never one this node holds or copies, and while jobs here read storage only the inputs of
those jobs; on an injected clock, each pass run by the test."""

from __future__ import annotations

import logging

from htda.cache.backends.posix import PosixStorage
from htda.cache.backends.xrootd import XRootDStorage
from htda.cache.readahead import ReadAhead
from htda.node.metrics import Registry
from testkit.clock import FakeClock
from testkit.storage import XCacheProxy, make_tree

A, B, C, D = (f"/store/new/{name}.root" for name in "abcd")
FILES = {A: 300_000, B: 200_000, C: 1_000, D: 5_000}


class CountingStorage(PosixStorage):
    """POSIX storage that records which files were read and how far."""

    def __init__(self, root: str):
        super().__init__(root)
        self.reads: list[tuple[str, int]] = []

    def read(self, lfn, sink, offset=0, buffer_size=8 << 20):
        n = super().read(lfn, sink, offset, buffer_size)
        self.reads.append((lfn, n))
        return n


def make(tmp_path, busy=frozenset(), reading=(), **kw):
    make_tree(tmp_path / "storage", FILES)
    storage, clock, metrics = CountingStorage(str(tmp_path / "storage")), FakeClock(), Registry()
    ahead = ReadAhead(lambda: storage, lambda lfn: lfn in busy, lambda: reading, logging.getLogger("test"), metrics,
                      clock=clock, **kw)
    return ahead, storage, clock, metrics


def drain(ahead) -> None:
    for _ in range(20):
        ahead.read_next()


def read(storage) -> list[str]:
    return [lfn for lfn, _ in storage.reads]


def sample(metrics: Registry, line: str) -> bool:
    return line in metrics.render().splitlines()


def test_files_are_read_whole_in_the_order_asked_and_counted(tmp_path):
    ahead, storage, _, metrics = make(tmp_path)
    assert ahead.ask([[B, A]]) == 2
    drain(ahead)
    assert storage.reads == [(B, 200_000), (A, 300_000)]
    assert sample(metrics, "htda_cache_read_ahead_bytes_total 500000")
    assert sample(metrics, 'htda_cache_read_ahead_files_total{outcome="read"} 2')


def test_held_copying_repeated_and_recent_files_are_skipped_until_recent_has_passed(tmp_path):
    ahead, storage, clock, metrics = make(tmp_path, busy={C}, recent=600.0)
    assert ahead.ask([[A, A, C]]) == 1
    drain(ahead)
    assert ahead.ask([[A]]) == 0  # read a moment ago: the read-through cache has it
    clock.advance(601)
    assert ahead.ask([[A]]) == 1
    drain(ahead)
    assert read(storage) == [A, A]
    assert sample(metrics, 'htda_cache_read_ahead_files_total{outcome="skipped"} 3')


def test_a_file_copied_meanwhile_is_not_read_and_a_missing_one_fails_without_stopping_the_queue(tmp_path):
    busy: set[str] = set()
    ahead, storage, _, metrics = make(tmp_path, busy=busy)
    assert ahead.ask([[A, "/store/gone.root", B]]) == 3
    busy.add(A)  # the cache node started copying it: the copy reads it through the same cache
    drain(ahead)
    assert read(storage) == [B]
    assert sample(metrics, 'htda_cache_read_ahead_files_total{outcome="failed"} 1')
    assert sample(metrics, "htda_cache_read_ahead_bytes_total 200000")


def test_while_jobs_read_storage_only_their_inputs_are_read_and_the_others_expire(tmp_path):
    reading: set[str] = set()
    ahead, storage, clock, metrics = make(tmp_path, reading=reading, max_wait=60.0)
    assert ahead.ask([[A, B], [C, D]]) == 4  # two jobs: A, B for the first, C, D for one still queued
    reading.add(A)  # the first job started and reads A itself
    drain(ahead)
    assert read(storage) == [A, B]  # the running job's inputs, its next one in time for it
    clock.advance(30)
    drain(ahead)
    assert read(storage) == [A, B]  # the queued job's inputs would take the link from the running job
    reading.clear()
    reading.add(D)  # the second job started: its inputs are due
    drain(ahead)
    assert read(storage) == [A, B, C, D]
    assert ahead.ask([[B, "/store/new/e.root"]]) == 1
    reading.clear()
    reading.add(A)
    clock.advance(61)
    drain(ahead)
    assert ahead.queued() == 0 and sample(metrics, 'htda_cache_read_ahead_files_total{outcome="expired"} 1')


def test_the_queue_is_bounded(tmp_path):
    ahead, _, _, metrics = make(tmp_path, limit=2)
    assert ahead.ask([list(FILES)]) == 2
    assert ahead.queued() == 2 and sample(metrics, "htda_cache_read_ahead_queued 2")
    assert sample(metrics, 'htda_cache_read_ahead_files_total{outcome="skipped"} 2')


def test_reading_ahead_through_a_real_read_through_proxy_leaves_the_file_on_the_workers_disk(
        xrootd_server, shared_tmp):
    """The point of it: after a read ahead, the worker's XRootD proxy file cache holds the whole file, so the
    job's own reads (and the cache node's copy) come from the worker's disk, not the storage link."""
    make_tree(xrootd_server.root, FILES)
    proxy = XCacheProxy(shared_tmp / "proxy-data", shared_tmp / "proxy", xrootd_server).start()
    try:
        storage = XRootDStorage(proxy.url + "/", {"timeout": 10})
        ahead = ReadAhead(lambda: storage, lambda lfn: False, lambda: (), logging.getLogger("test"), Registry())
        assert proxy.cached_bytes(A) == 0
        assert ahead.ask([[A]]) == 1
        ahead.read_next()
        assert proxy.cached_bytes(A) >= FILES[A]  # whole 1 MB blocks: at least the file
        assert proxy.cached_bytes(B) == 0  # nothing it was not asked for
    finally:
        proxy.stop()

"""Storage reads reported by cache nodes: which files' staging is deferred, for how long."""

from __future__ import annotations

import pytest

from htda.coordinator.reads import StorageReads


def test_a_reported_read_defers_the_file_until_its_report_expires():
    reads = StorageReads(max_defer=600)
    reads.report("w1", ["/a", "/b"], ttl=10, now=100)
    assert reads.deferred(105) == {"/a", "/b"}
    assert reads.deferred(110) == set()  # the report's time to live ran out


def test_a_new_report_replaces_the_nodes_last_one_and_nodes_add_up():
    reads = StorageReads(max_defer=600)
    reads.report("w1", ["/a", "/b"], ttl=10, now=100)
    reads.report("w2", ["/c"], ttl=10, now=101)
    reads.report("w1", ["/b"], ttl=10, now=102)  # the job on w1 finished /a
    assert reads.deferred(103) == {"/b", "/c"}
    assert reads.snapshot(103) == {"w1": ["/b"], "w2": ["/c"]}
    reads.report("w1", [], ttl=10, now=104)
    reads.forget("w2")  # w2 left the pool
    assert reads.deferred(105) == set()


def test_a_file_read_without_pause_is_deferred_at_most_max_defer_seconds():
    reads = StorageReads(max_defer=30)
    for t in range(100, 140, 5):  # one reader after another, reported every 5 s
        reads.report("w1", ["/long"], ttl=12, now=t)
    assert reads.deferred(129) == {"/long"}
    assert reads.deferred(131) == set()  # its copy may start now, though jobs still read it
    reads.report("w1", [], ttl=12, now=140)
    reads.report("w1", ["/long"], ttl=12, now=141)  # a new run of reads after a pause defers again
    assert reads.deferred(142) == {"/long"}


def test_max_defer_zero_never_defers():
    reads = StorageReads(max_defer=0)
    reads.report("w1", ["/a"], ttl=10, now=100)
    assert reads.deferred(100) == set()


@pytest.mark.parametrize("ttl", [0, 0.5])
def test_a_short_ttl_expires_at_once(ttl):
    reads = StorageReads(max_defer=60)
    reads.report("w1", ["/a"], ttl=ttl, now=100)
    assert reads.deferred(100 + ttl) == set()


def test_readers_name_the_node_whose_job_reads_each_file():
    reads = StorageReads(max_defer=600)
    reads.report("w2", ["/a"], ttl=10, now=100, deferred=["/a", "/b"])  # /b: the same job's next input
    reads.report("w1", ["/c"], ttl=10, now=100, deferred=[])  # read, but wanted by several jobs: not deferred
    reads.report("w3", ["/a"], ttl=10, now=100)
    assert reads.readers(101) == {"/a": "w2", "/b": "w2", "/c": "w1"}  # of two readers, the first by name
    assert reads.readers(111) == {}  # the reports expired

"""The compact per-file and per-group structures of the rating state (issue 18)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from htda.coordinator import columns
from htda.coordinator.columns import Column, LfnCache, Membership, SizeColumn


def test_a_column_reads_like_a_dict():
    keys = Column("d", -math.inf)
    keys[3] = 1.5
    keys[5000] = 2.5  # grows past its length
    assert keys.get(3) == 1.5 and keys[5000] == 2.5 and keys.get(4) is None and keys.get(-1, 0.0) == 0.0
    assert 3 in keys and 4 not in keys and "3" not in keys
    assert list(keys) == [3, 5000] and len(keys) == 2
    keys[3] = 7.0
    assert len(keys) == 2 and keys[3] == 7.0
    with pytest.raises(KeyError):
        keys[4]


def test_sizes_tell_unknown_files_from_unknown_sizes():
    sizes = SizeColumn()
    sizes[1] = None
    sizes[2] = 0
    sizes[3] = 5 << 40
    assert 1 in sizes and sizes.get(1, "absent") is None
    assert sizes.get(2) == 0 and sizes[3] == 5 << 40 and sizes.get(4, "absent") == "absent" and len(sizes) == 3


def test_membership_loads_in_bulk_and_grows_through_an_overlay():
    members = Membership()
    members.load([(2, 7), (1, 4), (2, 3), (2, 7), (4, 1)])
    assert members.get(1) == (4,) and members.get(2) == (3, 7) and members.get(3) == () and members.get(9) == ()
    assert members.count(2) == 2 and members.count(9) == 0
    assert members.add([(2, 7), (2, 5), (9, 8), (9, 6)]) == {2, 9}
    assert members.get(2) == (3, 5, 7) and members.get(9) == (6, 8)
    assert members.add([(2, 5)]) == set()
    assert sorted(members.groups()) == [1, 2, 4, 9]


def test_the_overlay_is_folded_into_the_arrays(monkeypatch):
    monkeypatch.setattr(columns, "OVERLAY_MIN", 2)
    members = Membership()
    members.load([(1, 1), (2, 2), (3, 3), (4, 4)])
    members.add([(1, 10)])
    members.add([(2, 20)])
    members.add([(7, 70)])  # the third changed group: folded
    assert members.overlay == 0
    assert [members.get(g) for g in range(1, 8)] == [(1, 10), (2, 20), (3,), (4,), (), (), (70,)]


def test_lfns_are_kept_for_the_wanted_files_and_fetched_for_the_others():
    database = {fid: f"/store/f{fid}" for fid in range(1, 10)}
    asked: list[list[int]] = []

    def fetch(ids):
        ids = list(ids)
        asked.append(sorted(ids))
        return {fid: database[fid] for fid in ids if fid in database}

    lfns = LfnCache(fetch)
    lfns.offer(1, "/store/f1")  # not wanted: not kept
    assert len(lfns) == 0
    lfns.retain({1, 2})
    assert asked == [[1, 2]] and lfns[1] == "/store/f1" and len(lfns) == 2
    lfns.offer(3, "/store/f3")
    lfns.retain({2, 3})
    assert asked[-1] == [3] and lfns[3] == "/store/f3"
    assert lfns[5] == "/store/f5" and asked[-1] == [5]  # not kept: fetched
    assert lfns.many([2, 6, 42]) == {2: "/store/f2", 6: "/store/f6"}
    with pytest.raises(KeyError):
        lfns[42]
    offline = LfnCache()
    offline.offer(1, "/a")
    assert offline[1] == "/a" and offline.many([1, 2]) == {1: "/a"}


def test_a_column_is_read_in_bulk_as_it_is_one_by_one():
    keys = Column("d", -math.inf)
    assert keys.take(np.array([1, 2], dtype=np.int64)).tolist() == [-math.inf, -math.inf]  # nothing stored yet
    keys[3] = 1.5
    keys[10] = -2.0
    ids = np.array([10, 3, 4, 0, -1, 99_999], dtype=np.int64)
    assert keys.take(ids).tolist() == [keys.get(int(i), -math.inf) for i in ids]
    keys[200_000] = 4.0  # the array still grows after a bulk read: the read let its buffer go
    assert keys.take(np.array([200_000])).tolist() == [4.0]
    sizes = SizeColumn()
    sizes[1], sizes[2] = None, 7
    unknown, known, absent = sizes.take(np.array([1, 2, 3])).tolist()
    assert known == 7 and unknown < 0 and absent < 0 and unknown != absent  # both unknown, told apart

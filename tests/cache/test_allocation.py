"""Allocation: score order, eviction of lower scores for higher ones, watermarks, releases."""

from __future__ import annotations

from htda.cache.allocation import Room, Wanted, holdable, plan


class Dev:
    def __init__(self, path: str):
        self.path = path


A, B = Dev("a"), Dev("b")


def room(dev, capacity=1000, used=0, free=10**9, high=1.0, low=0.5):
    return Room(dev, capacity, used, free, high, low)


def test_stages_best_first_and_releases_what_does_not_fit():
    wanted = [Wanted("/low", 1.0, 600), Wanted("/high", 9.0, 600), Wanted("/mid", 5.0, 300)]
    p = plan(wanted, {}, {}, [room(A)])
    assert [(w.lfn, d) for w, d in p.stage] == [("/high", A), ("/mid", A)]
    assert p.release == ["/low"] and p.evict == []


def test_higher_score_evicts_lower_held_file():
    held = {"/old": (A, 600)}
    p = plan([Wanted("/old", 1.0, 600), Wanted("/new", 9.0, 600)], held, {}, [room(A, used=600)])
    assert [w.lfn for w, _ in p.stage] == ["/new"]
    assert p.evict == ["/old"] and p.release == []


def test_held_files_kept_in_place_and_unassigned_kept_spare_while_room_is_left():
    held = {"/keep": (A, 400), "/spare": (A, 100)}
    p = plan([Wanted("/keep", 2.0, 400)], held, {}, [room(A, used=500)])
    assert p.keep == ["/keep"] and p.spare == ["/spare"] and p.evict == [] and p.stage == []
    p = plan([Wanted("/keep", 2.0, 400)], held, {}, [room(A, used=500)], keep_spare=False)  # e.g. draining
    assert p.keep == ["/keep"] and p.spare == [] and p.evict == ["/spare"]


def test_spare_copies_give_their_room_to_assigned_files_and_go_first():
    held = {"/s1": (A, 300), "/s2": (A, 300), "/old": (A, 200)}  # /s1 first: the better last-known score
    room_a = room(A, used=800, low=1.0)  # room for 1000 bytes of copies (both marks 1.0), 800 used
    p = plan([Wanted("/old", 1.0, 200), Wanted("/new", 5.0, 300)], held, {}, [room_a])
    assert [w.lfn for w, _ in p.stage] == ["/new"] and p.keep == ["/old"]
    assert p.spare == ["/s1"] and p.evict == ["/s2"]  # 300 + 200 assigned leave room for one spare copy
    p = plan([Wanted("/old", 1.0, 200), Wanted("/new", 5.0, 300), Wanted("/big", 4.0, 400)], held, {}, [room_a])
    assert p.spare == [] and p.evict == ["/s1", "/s2"] and p.release == []  # assigned files first, always
    p = plan([Wanted("/old", 1.0, 200)], held, {}, [room(A, used=800, high=1.0, low=0.5)])
    assert p.spare == ["/s1"] and p.evict == ["/s2"]  # spare copies stay under the low mark (500 bytes)


def test_spreads_over_devices_by_room():
    wanted = [Wanted(f"/f{i}", 10.0 - i, 400) for i in range(4)]
    p = plan(wanted, {}, {}, [room(A), room(B)])
    assert sorted(d.path for _, d in p.stage) == ["a", "a", "b", "b"]


def test_in_flight_counts_and_unwanted_in_flight_is_cancelled():
    p = plan([Wanted("/x", 5.0, 700), Wanted("/y", 4.0, 700)], {}, {"/x": (A, 700), "/z": (A, 10)}, [room(A)])
    assert p.keep == ["/x"] and p.release == ["/y"] and p.cancel == ["/z"]


def test_watermarks_and_file_system_free_space():
    assert room(A, capacity=1000, used=800, high=0.9, low=0.6).limit() == 900
    assert room(A, capacity=1000, used=950, high=0.9, low=0.6).limit() == 600  # above high: down to low
    assert room(A, capacity=1000, used=100, free=50, high=0.9).limit() == 150  # the disk is the limit
    assert Room(A, 1000, 100, 50, 0.9, 0.6, reserve=30).limit() == 120  # keep a share of a shared disk free
    assert Room(A, 1000, 0, 10, 0.9, 0.6, reserve=30).limit() == 0
    held = {"/a": (A, 300), "/b": (A, 300), "/c": (A, 300)}
    wanted = [Wanted("/a", 3.0, 300), Wanted("/b", 2.0, 300), Wanted("/c", 1.0, 300)]
    p = plan(wanted, held, {}, [room(A, capacity=1000, used=900, high=0.8, low=0.6)])
    assert p.keep == ["/a", "/b"] and p.evict == ["/c"]


def test_duplicate_lfns_count_once():
    p = plan([Wanted("/x", 5.0, 10), Wanted("/x", 1.0, 10)], {}, {}, [room(A)])
    assert len(p.stage) == 1


def test_devices_on_one_file_system_count_its_free_space_once():
    # two devices on one disk with 100 bytes free (reserve 5), 10 bytes of copies each: alone, each could take
    # 100 more; together they share the 95 the disk can give, 47 each
    shared = [Room(A, 1000, 10, 100, 1.0, 1.0, reserve=5, filesystem="disk1"),
              Room(B, 1000, 10, 100, 1.0, 1.0, reserve=5, filesystem="disk1")]
    assert [r.limit(r.high) for r in shared] == [105, 105]
    assert holdable(shared) == [57, 57]
    apart = [Room(A, 1000, 10, 100, 1.0, 1.0, reserve=5, filesystem="disk1"),
             Room(B, 1000, 10, 100, 1.0, 1.0, reserve=5, filesystem="disk2")]
    assert holdable(apart) == [105, 105]
    # room already within what the disk gives: nothing to scale
    small = [Room(A, 40, 10, 100, 1.0, 1.0, filesystem="disk1"), Room(B, 30, 0, 100, 1.0, 1.0, filesystem="disk1")]
    assert holdable(small) == [40, 30]

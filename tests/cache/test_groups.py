"""The input keys a cache node publishes: hot groups it was given whole and holds whole, stamped when the
list changes."""

from __future__ import annotations

from htda.cache.groups import HeldGroups
from htda.protocol.coordinator import AssignedFile, input_key
from testkit.clock import FakeClock

A = ["/store/a/1.root", "/store/a/2.root"]
B = ["/store/b/1.root"]


def entries(*lfns: str) -> list[AssignedFile]:
    return [AssignedFile(lfn=lfn, score=1.0, size=10, source=None) for lfn in lfns]


def test_a_group_is_published_once_every_file_is_held_and_stamped_when_that_changes():
    clock = FakeClock(1000.0)
    groups = HeldGroups(clock)
    groups.assigned(entries(*A, *B), [[0, 1], [2]])
    held = {A[0]}
    groups.refresh(held.__contains__)
    assert groups.state == ((), 0.0)  # one of A's two files: nothing held whole
    clock.advance(5)
    held |= {A[1], B[0]}
    groups.refresh(held.__contains__)
    assert groups.state == ((input_key(A), input_key(B)), 1005.0)
    clock.advance(5)
    groups.refresh(held.__contains__)
    assert groups.state[1] == 1005.0  # unchanged list: the stamp stays
    held.discard(B[0])  # evicted
    groups.refresh(held.__contains__)
    assert groups.state == ((input_key(A),), 1010.0)


def test_the_key_is_that_of_the_lfns_as_jobs_named_them():
    groups = HeldGroups(FakeClock(1.0))
    named = ["//store//a/1.root", "/store/a/2.root"]  # as a job wrote it; the copy is held under its normal form
    groups.assigned(entries(*named), [[0, 1]])
    groups.refresh({"/store/a/1.root", "/store/a/2.root"}.__contains__)
    assert groups.state[0] == (input_key(named),)


def test_odd_groups_are_left_out():
    groups = HeldGroups(FakeClock(1.0))
    groups.assigned(entries(*A, "/store/../etc/passwd"), [[0, 7], [], [0, 2], [1]])
    groups.refresh(lambda lfn: True)
    assert groups.state[0] == (input_key([A[1]]),)  # out of range, empty, a bad LFN: skipped

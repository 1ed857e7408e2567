"""The index of held copies."""

from __future__ import annotations

from htda.cache.backends.posix import PosixDevice
from htda.cache.index import Entry, Index


def _entry(lfn: str, device: PosixDevice, visible_since: float) -> Entry:
    return Entry(lfn, device, 10, 0.0, "", "none", "posix", 0.0, visible_since=visible_since)


def test_an_open_counts_as_served_from_the_copy_only_once_the_copy_was_visible(tmp_path):
    device = PosixDevice(str(tmp_path))
    index = Index()
    index.add(_entry("/a", device, 0.0))  # found at start-up: served from the first open on
    index.add(_entry("/b", device, 100.0))  # landed at 100
    assert index.served_at("/a", 5.0)
    assert index.served_at("/b", 100.0) and index.served_at("/b", 101.0)
    assert not index.served_at("/b", 99.9)  # the job's open was read before the copy landed: storage
    assert not index.served_at("/c", 101.0)  # never held
    index.remove("/b")
    assert not index.served_at("/b", 101.0)

"""Allocation: which assigned files to hold on which device, what to evict, what to release.

A pure function of the assignment (best score first), the index, the copies
in flight and each device's room, so it is easy to test and to reason about.
Each device has a high and a low watermark (fractions of its capacity).
Files are placed up to the high watermark; once a device is above it
(because its file system filled from elsewhere, or the capacity shrank), the
room drops to the low watermark, so eviction frees a useful amount at once
instead of one file per cycle.  Walking the files best first means a held
file that no longer fits under the room left by better files is evicted, and
a new file that fits nowhere is released back to the coordinator.

A copy the coordinator no longer assigns here (it moved the file, or rates it
lower now) is *spare*: it stays while the room the assigned files leave
below the low watermark holds it, best last-known score first, and goes
first when that room is needed.  The locator still lists it, so jobs steered here before the move
(or sent here because the new holder is busy) read it locally instead of
from storage, as a cache that evicts on demand would let them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .backends.base import CacheDevice

__all__ = ["Wanted", "Room", "Plan", "plan", "holdable"]


@dataclass(frozen=True)
class Wanted:
    """One assigned file (``size`` resolved from the source when the coordinator did not know it).

    For a held file the size of the copy counts, not the coordinator's
    figure: a changed source is found by revalidating the copy, not here.
    """

    lfn: str
    score: float
    size: int
    source: str | None = None
    defer: bool = False  # jobs read it from storage now: keep its room, copy it later
    #: pool members holding (or assigned) the file, to copy from in order before storage
    peers: tuple[str, ...] = ()
    #: copy only from ``peers``, never from storage (fails transiently while none can serve it)
    peers_only: bool = False


@dataclass
class Room:
    """A device's space: capacity, what our copies use, what its file system has free."""

    device: CacheDevice
    capacity: int
    used: int
    free: int
    high: float = 0.95
    low: float = 0.90
    #: bytes to leave free on a shared file system (``1 - high`` of it)
    reserve: int = 0
    #: the file system beneath the device: devices on one share its free space
    filesystem: object = None

    def limit(self, mark: float | None = None) -> int:
        """Bytes our copies may take: ``mark`` x capacity (by default high, or low once above high),
        never more than the file system can give while keeping its reserve free."""
        if mark is None:
            mark = self.high if self.used <= self.high * self.capacity else self.low
        return int(max(0, min(mark * self.capacity, self.used + self.free - self.reserve)))


@dataclass
class Plan:
    stage: list[tuple[Wanted, CacheDevice]] = field(default_factory=list)
    keep: list[str] = field(default_factory=list)
    spare: list[str] = field(default_factory=list)  # unassigned copies kept in the room left
    evict: list[str] = field(default_factory=list)
    release: list[str] = field(default_factory=list)
    cancel: list[str] = field(default_factory=list)


def plan(wanted: list[Wanted], held: dict[str, tuple[CacheDevice, int]],
         in_flight: dict[str, tuple[CacheDevice, int]], rooms: list[Room], keep_spare: bool = True) -> Plan:
    """Decide a cycle's work.  ``held``/``in_flight`` map LFN -> (device, size); unassigned copies in
    ``held`` are kept as spare in its order while room is left (none without ``keep_spare``)."""
    out = Plan()
    left = {id(r.device): r.limit() for r in rooms}
    seen: set[str] = set()
    for w in sorted(wanted, key=lambda w: -w.score):
        if w.lfn in seen:
            continue
        seen.add(w.lfn)
        if w.lfn in in_flight:
            device, size = in_flight[w.lfn]
            left[id(device)] = left.get(id(device), 0) - size
            out.keep.append(w.lfn)
            continue
        if w.lfn in held:
            device, size = held[w.lfn]
            if left.get(id(device), 0) >= size:
                left[id(device)] -= size
                out.keep.append(w.lfn)
            continue  # else: no longer fits under better files, evicted below
        target = max(rooms, key=lambda r: left[id(r.device)], default=None)
        if target is not None and left[id(target.device)] >= w.size:
            left[id(target.device)] -= w.size
            out.stage.append((w, target.device))
        else:
            out.release.append(w.lfn)
    scores = {w.lfn: w.score for w in wanted}
    if keep_spare:
        # spare copies stay under the low mark: they never push a device over its high mark, which would
        # shrink the room of the assigned files
        spare_left = {id(r.device): left[id(r.device)] - (r.limit() - r.limit(r.low)) for r in rooms}
        for lfn, (device, size) in held.items():
            if lfn not in scores and spare_left.get(id(device), 0) >= size:
                spare_left[id(device)] -= size
                out.spare.append(lfn)
    kept = set(out.keep).union(out.spare)
    # worst first, unassigned copies before any assigned one: the order they go in (and are logged in) is the
    # same whatever order the copies were made in
    out.evict = sorted((lfn for lfn in held if lfn not in kept), key=lambda lfn: scores.get(lfn, float("-inf")))
    out.cancel = [lfn for lfn in in_flight if lfn not in kept]
    return out


def holdable(rooms: list[Room]) -> list[int]:
    """What each device may hold under its high mark, with the free space of a file system that several
    devices share counted once: their rooms together never exceed what that file system can give.

    This is the one meaning of *capacity* HTDA reports (heartbeat, ``/cache/devices``, metrics, CLI,
    dashboard); ``used`` is our copies, ``free`` = capacity - used."""
    limits = [r.limit(r.high) for r in rooms]
    groups: dict[object, list[int]] = {}
    for i, room in enumerate(rooms):
        groups.setdefault(room.filesystem if room.filesystem is not None else i, []).append(i)
    for members in groups.values():
        if len(members) < 2:
            continue
        # what the file system can still give: its free space less the largest reserve any of them keeps
        available = max(0, rooms[members[0]].free - max(rooms[i].reserve for i in members))
        extra = {i: max(0, limits[i] - rooms[i].used) for i in members}  # each device's room beyond its copies
        wanted = sum(extra.values())
        if wanted > available:  # scale every device's extra room down to its share of what is there
            for i in members:
                limits[i] = rooms[i].used + extra[i] * available // wanted
    return limits


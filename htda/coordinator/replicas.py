"""Replicas: more copies of the groups that many jobs read, in room no first copy wants.  Pure, no I/O.

One copy of a group serves as many of its jobs at a time as its node has
slots; when a group is read by many jobs at once they queue for that node
(or, steered by Rank alone, run elsewhere and read storage).  As in Scarlett
(Ananthanarayanan et al., "Scarlett: coping with skewed content popularity
in MapReduce clusters", EuroSys 2011), popular groups get copies in
proportion to their popularity, within a budget:

- **How many.**  A group whose score is a share ``p`` of the hot groups'
  scores (``groups`` are jobs' input groups, one per job: a task's union of
  its jobs' inputs would count each job twice) draws about ``p`` of their
  jobs, that is ``p * N`` nodes' worth of a pool of ``N`` cache nodes; it
  is given ``ceil(p * N * h)`` copies (the first one included), at most
  ``max_copies`` and at most ``N``.  ``h``, the *headroom* (the coordinator's
  default 2), provisions for peaks over that mean: jobs come in bursts (a
  cluster submitted at once, a queue deeper than the slots), and the jobs of
  one burst that read a group all want its holders at the same time.  A pool
  of evenly popular groups gets no replica with ``h = 1``.
- **Where.**  Only in the room the placement left (capacity minus the first
  copies): a replica never displaces a first copy, and it goes first when a
  first copy needs its room (replicas are computed again every cycle, after
  the placement).  A group's copy is whole, on a node that holds none of it
  yet, preferring the node that held that copy in the previous cycle (so
  replicas do not wander), then the node with the least demand on it (the
  scores of the hot groups it holds, each split over its copies), then the
  node with most room left.
- **Who first.**  When the room is short, copies go by the highest-averages
  rule: the next copy goes to the group with the best ``score / copies``
  (D'Hondt), so a group twice as popular ends with about twice the copies.
- Only groups whose files all sit on one node are replicated (a group split
  over several nodes is already served by several); their scores still
  count in the shares.
- **Hysteresis.**  A replica made in an earlier cycle stays while its group
  is hot and its node has room for it, also when the group's share no
  longer asks for that many copies (after the copies the shares ask for,
  best group first, at most ``max_copies``): copies leave for room, not
  for a dip in a share.  Without it a group's share falls as new data
  comes in and its second copy goes; in the cluster benchmark a job the
  locator had steered to such a copy (its group held there in the pass
  before) found none of it there and read its 163 MB from storage (16 s
  instead of 3), while the first copy sat on another node.

Tried and not kept: a second copy, in room left over, of every hot group
read more than once lately (score >= 1.5), for the third job of a dataset
that queued for its one holder's slots.  Three cluster benchmark runs did
not move HTDA's makespan (medians 155 and 156 s), and copies came and went
as scores crossed the threshold: a cache node dropped second copies it had
just made (``tests/ops/test_faults.py`` caught it).

Replicas are copied from the nodes that hold the file (the cache node's
peer copies), never from storage: the storage link is what a site runs
short of, and a replica is worth making only if it costs none of it.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Collection, Hashable, Iterable, Mapping, Sequence
from typing import Generic, TypeVar

from .placement import GroupCandidate

__all__ = ["copies_wanted", "group_holders", "replicate"]

F = TypeVar("F", bound=Hashable)


def copies_wanted(score: float, total: float, nodes: int, max_copies: int, headroom: float = 1.0) -> int:
    """How many copies (the first one included) a group of ``score`` deserves when the hot groups' scores sum to
    ``total`` on a pool of ``nodes`` cache nodes, with room for ``headroom`` times its mean demand."""
    if total <= 0 or score <= 0 or nodes <= 1:
        return 1
    share = min(score / total, 1.0)
    return max(1, min(max_copies, nodes, math.ceil(share * nodes * headroom - 1e-9)))


class _Shares(Generic[F]):
    """The demand on each node while replicas are handed out: a group's score split evenly over its holders."""

    def __init__(self, nodes: Iterable[str]):
        self.load = dict.fromkeys(nodes, 0.0)

    def add(self, score: float, holders: Collection[str]) -> None:
        for node in holders:
            if node in self.load:
                self.load[node] += score / len(holders)

    def grow(self, score: float, holders: Collection[str], new: str) -> None:
        """One more holder ``new``: each of the ``holders`` gives up its part of the group's demand to it."""
        k = len(holders)
        for node in holders:
            if node in self.load:
                self.load[node] -= score / k - score / (k + 1)
        self.load[new] += score / (k + 1)


def _room(placement: Mapping[F, str], size: Callable[[F], int], capacities: Mapping[str, int]) -> dict[str, int]:
    room = dict(capacities)
    for lfn, node in placement.items():
        if node in room:
            room[node] -= size(lfn)
    return room


def replicate(
    groups: Sequence[GroupCandidate[F]],
    placement: Mapping[F, str],
    size: Callable[[F], int],
    capacities: Mapping[str, int],
    *,
    max_copies: int,
    headroom: float = 1.0,
    current: Mapping[F, tuple[str, ...]] | None = None,
    excluded: Mapping[F, Collection[str]] | None = None,
    room: Mapping[str, int] | None = None,
) -> dict[F, tuple[str, ...]]:
    """The replicas ``{file: (node, ...)}`` (nodes other than the file's placed one, second copy first).

    ``groups`` are the hot groups with their scores (their sum is the popularity the shares are taken of);
    ``placement`` is the new placement of first copies, ``size(file)`` its bytes, ``capacities`` the bytes
    each live cache node may hold; ``headroom`` how many times its mean demand a group's copies should serve;
    ``current`` the replicas of the previous cycle; ``excluded`` the nodes that released a file.  See the
    module docstring for the rules.  ``room``, the bytes of each node's capacity that ``placement`` leaves,
    is computed from them when not given.
    """
    if max_copies <= 1 or len(capacities) <= 1:
        return {}
    room = _room(placement, size, capacities) if room is None else {node: room[node] for node in capacities}
    current, excluded = current or {}, excluded or {}
    out: dict[F, list[str]] = {}
    hot = [g for g in groups if g.score > 0 and math.isfinite(g.score)]
    total = sum(g.score for g in hot)
    shares: _Shares[F] = _Shares(room)
    queue: list[tuple[float, int, int]] = []  # (-(score / copies so far), group's rank, copies so far)
    for rank, group in enumerate(hot):  # a group split over nodes is served by several already
        holders = group_holders(group.files, placement, out)
        shares.add(group.score, holders)
        if holders and copies_wanted(group.score, total, len(room), max_copies, headroom) > 1:
            queue.append((-group.score, rank, 1))
    heapq.heapify(queue)
    while queue:
        _, rank, copies = heapq.heappop(queue)
        group = hot[rank]
        holders = group_holders(group.files, placement, out)
        if not holders or len(holders) >= copies_wanted(group.score, total, len(room), max_copies, headroom):
            continue
        target = _target(group.files, holders, room, size, placement, current, excluded, out, shares.load)
        if target is None:
            continue
        _add_copy(group.files, target, placement, out, room, size)
        shares.grow(group.score, holders, target)
        heapq.heappush(queue, (-group.score / (len(holders) + 1), rank, len(holders) + 1))
    _keep_current(sorted(hot, key=lambda g: -g.score), placement, size, room, current, excluded, out,
                  min(max_copies, len(room)))
    return {lfn: tuple(nodes) for lfn, nodes in out.items()}


def _keep_current(hot: Sequence[GroupCandidate[F]], placement: Mapping[F, str], size: Callable[[F], int],
                  room: dict[str, int], current: Mapping[F, tuple[str, ...]], excluded: Mapping[F, Collection[str]],
                  out: dict[F, list[str]], most: int) -> None:
    """Last cycle's replicas that the shares no longer ask for stay where their node still has room for them,
    best group first, up to ``most`` copies of a group (the hysteresis of the module docstring)."""
    for group in hot:
        holders = group_holders(group.files, placement, out)
        if not holders:
            continue
        before = set.intersection(*(set(current.get(lfn, ())) for lfn in group.files))
        for node in sorted(before - holders):
            if len(holders) >= most:
                break
            if node not in room or _released(group.files, node, excluded):
                continue
            if sum(map(size, _lacking(group.files, node, placement, out))) > room[node]:
                continue
            _add_copy(group.files, node, placement, out, room, size)
            holders.add(node)


def _lacking(files: Sequence[F], node: str, placement: Mapping[F, str], replicas: Mapping[F, list[str]]) -> list[F]:
    """The files of a group that ``node`` holds no copy of (first or replica)."""
    return [lfn for lfn in files if placement.get(lfn) != node and node not in replicas.get(lfn, ())]


def _released(files: Sequence[F], node: str, excluded: Mapping[F, Collection[str]]) -> bool:
    """Whether ``node`` released any of the files (it gets no copy of their group)."""
    return any(node in excluded.get(lfn, ()) for lfn in files)


def _add_copy(files: Sequence[F], node: str, placement: Mapping[F, str], replicas: dict[F, list[str]],
              room: dict[str, int], size: Callable[[F], int]) -> None:
    """A copy of a whole group on ``node``: the files it lacks become its replicas and take their room."""
    for lfn in _lacking(files, node, placement, replicas):
        replicas.setdefault(lfn, []).append(node)
        room[node] -= size(lfn)


def group_holders(files: Sequence[F], placement: Mapping[F, str], replicas: Mapping[F, Collection[str]]) -> set[str]:
    """The nodes that hold every file of a group (its first copies and the replicas so far); empty when the
    group is not wholly placed on some node."""
    holders: set[str] | None = None
    for lfn in files:
        node = placement.get(lfn)
        if node is None:
            return set()
        here = {node, *replicas.get(lfn, ())}
        holders = here if holders is None else holders & here
        if not holders:
            return set()
    return holders or set()


def _target(files: Sequence[F], holders: set[str], room: Mapping[str, int], size: Callable[[F], int],
            placement: Mapping[F, str], current: Mapping[F, tuple[str, ...]], excluded: Mapping[F, Collection[str]],
            replicas: Mapping[F, list[str]], load: Mapping[str, float]) -> str | None:
    """The node for one more copy of a group: it holds none of the group's copies, released none of its files
    and has room for what it lacks; last cycle's replica nodes first, then the node with the least demand on it
    (the hot groups it holds), then the roomiest."""
    before: dict[str, int] = {}
    for lfn in files:
        for node in current.get(lfn, ()):
            before[node] = before.get(node, 0) + 1
    best: tuple[int, float, int, str] | None = None
    for node, free in room.items():
        if node in holders or _released(files, node, excluded):
            continue
        need = sum(map(size, _lacking(files, node, placement, replicas)))
        if need > free:
            continue
        key = (before.get(node, 0), -load.get(node, 0.0), free - need, node)
        if best is None or key > best:
            best = key
    return None if best is None else best[3]

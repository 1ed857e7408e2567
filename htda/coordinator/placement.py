"""Placement: which cache node should hold which file.  Pure functions, no I/O.

Files are named by any hashable id (LFNs, or the database ids the
coordinator uses to save memory).

Input
    candidate groups (id, score, files) — the files of one job or task, rated
    by a :mod:`~htda.coordinator.rating` policy; the files' sizes; the cache
    nodes with their capacities in bytes; the current placement
    (``{lfn: node}``); and, per file, the nodes that released it.
Output
    the new placement ``{lfn: node}``.

A file's score is the best score of the candidate groups it belongs to (the
group max rule).  A file of the current placement that is in no candidate
group scores 0.  The work is done in three passes:

1. **Keep.**  Every file of the current placement stays on its node, best
   score first, as long as that node is still in the pool, did not release
   it, and still has room (a node whose capacity shrank sheds its worst
   files).
2. **Place**, group by group, best group first.  The files of a group that
   are not placed yet go together on one node if any node has room for all
   of them, preferring the node that already holds most of the group's bytes,
   then the one with the most free space (spreading popular groups, and so
   their jobs, over the pool).  Only when no single node can take them are
   they split, largest file first, over as few nodes as possible.
   *Hysteresis*: where free space is missing, a group of score ``g`` may
   evict files of score ``s`` only if ``s * hysteresis < g`` — a clearly
   better use of the space — and the worst files are evicted first.  A file
   placed in this run is never evicted in the same run (its score is at least
   that of every later group).
3. **Fill.**  Candidate files still without a node (failed, or evicted in
   pass 2) take whatever free space is left, best first, without evicting.

Stability: run again on its own output with the same scores and nodes,
``place`` returns that output unchanged.  Pass 1 keeps everything; in pass 2
a group's room (free space plus what it may evict) on a node can only have
shrunk since the previous run, where it already failed; and pass 3 left no
free space that any still unplaced file fits in.  Since LRFU scores decay
all by the same factor, the ratios the hysteresis compares do not change
while no new access arrives, so a quiet history moves nothing.

Between two full placements the coordinator keeps the third pass's result
in a :class:`Placer` and places only the groups whose scores rose: pass 1
would keep every file anyway (the other inputs are unchanged), so the
placer skips it and the comparison of two whole placements, and an
incremental cycle costs what changed rather than what is placed.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Collection, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from itertools import repeat
from typing import Generic, NamedTuple, TypeVar

__all__ = ["GroupCandidate", "Placer", "file_scores", "moves", "place"]

#: the type of a file's id: an LFN (``str``) or a database id (``int``); one placement uses one kind
F = TypeVar("F", bound=Hashable)


class GroupCandidate(NamedTuple, Generic[F]):
    """A group worth caching: its id, its score and its files (LFNs or ids).  A named tuple: cycles build many."""

    group: Hashable
    score: float
    files: tuple[F, ...]


@dataclass
class _Node(Generic[F]):
    """One cache node while a placement is computed."""

    name: str
    capacity: int
    free: int
    files: dict[F, float] = field(default_factory=dict)  # lfn -> score
    by_score: list[tuple[float, F]] = field(default_factory=list)  # min-heap once heaped; stale entries skipped
    heaped: bool = False  # the heap is built on the first eviction scan: most runs never need one
    room_bound: float = float("inf")  # free + evictable never grows during a run: skip hopeless scans


class _Planner(Generic[F]):
    """The state of one :func:`place` run."""

    def __init__(self, capacities: Mapping[str, int], sizes: Mapping[F, int | None], scores: dict[F, float],
                 excluded: Mapping[F, Collection[str]], hysteresis: float, unknown_size: int,
                 current: Mapping[F, str], readers: Mapping[F, str],
                 admit: Callable[[Hashable, list[F]], bool] | None = None):
        self.admit = admit
        self.asking = False  # the groups placed now face the admission filter (they are past the window)
        self.nodes: dict[str, _Node[F]] = {name: _Node(name, int(cap), int(cap))
                                           for name, cap in sorted(capacities.items())}
        get = sizes.get
        self.unknown_size = unknown_size
        self.size_of = {lfn: _bytes(get(lfn), unknown_size)
                        for lfn in (*scores, *(lfn for lfn in current if lfn not in scores))}
        self.scores = scores  # owned: Placer.update raises some between runs
        self.excluded = excluded
        self.hysteresis = hysteresis
        self.readers = readers
        self.where: dict[F, str] = {}
        self.evicted: list[F] = []
        self.was: dict[F, str | None] = {}  # each file put or evicted in this run -> its node before
        self.capacity = sum(node.capacity for node in self.nodes.values())

    def size(self, lfn: F) -> int:
        return self.size_of[lfn]

    def allowed(self, lfn: F, node: str) -> bool:
        return node not in self.excluded.get(lfn, ())

    def put(self, lfn: F, node: _Node[F]) -> None:
        self.was.setdefault(lfn, self.where.get(lfn))
        node.free -= self.size_of[lfn]
        self._rank(lfn, node, self.scores.get(lfn, 0.0))
        self.where[lfn] = node.name

    def _rank(self, lfn: F, node: _Node[F], score: float) -> None:
        """Enter ``lfn`` at ``score`` in its node's eviction order (an entry it had before goes stale)."""
        node.files[lfn] = score
        if node.heaped:
            heapq.heappush(node.by_score, (score, lfn))
        else:
            node.by_score.append((score, lfn))

    def rescore(self, lfn: F, score: float) -> None:
        """A new score for ``lfn`` (between two runs: :meth:`Placer.update`)."""
        self.scores[lfn] = score
        node = self.where.get(lfn)
        if node is not None:
            self._rank(lfn, self.nodes[node], score)

    def next_run(self) -> None:
        """Forget what only held during the last run: its evictions, moves and the nodes' room bounds (scores
        rose since, so more may be evictable)."""
        self.evicted, self.was, self.asking = [], {}, False
        for node in self.nodes.values():
            node.room_bound = float("inf")

    def moved(self) -> dict[F, tuple[str | None, str | None]]:
        """The files whose node this run changed: ``{lfn: (old node, new node)}``."""
        where = self.where
        return {lfn: (old, where.get(lfn)) for lfn, old in self.was.items() if old != where.get(lfn)}

    def evict(self, lfn: F) -> None:
        self.was.setdefault(lfn, self.where.get(lfn))
        self.evicted.append(lfn)
        node = self.nodes[self.where.pop(lfn)]
        del node.files[lfn]
        node.free += self.size(lfn)

    def make_room(self, node: _Node[F], need: int, group_score: float, group: Hashable = None) -> bool:
        """Evict the worst evictable files of ``node`` until ``need`` bytes are free; False (and no change) if
        the evictable files are not enough, or if the admission filter refuses ``group`` against them."""
        if node.free >= need:
            return True
        if need > node.room_bound:
            return False
        if not node.heaped:
            heapq.heapify(node.by_score)
            node.heaped = True
        popped: list[tuple[float, F]] = []
        seen: set[F] = set()
        room = node.free
        while node.by_score and room < need:
            score, lfn = heapq.heappop(node.by_score)
            if node.files.get(lfn) != score or lfn in seen:
                continue  # stale or duplicate heap entry (a file evicted and placed again)
            if score * self.hysteresis >= group_score:
                heapq.heappush(node.by_score, (score, lfn))
                break
            popped.append((score, lfn))
            seen.add(lfn)
            room += self.size(lfn)
        refused = room >= need and self.asking and self.admit is not None and \
            not self.admit(group, [lfn for _, lfn in popped])
        if room < need or refused:
            if not refused:
                node.room_bound = room
            for entry in popped:
                heapq.heappush(node.by_score, entry)
            return False
        for _, lfn in popped:
            self.evict(lfn)
        return True

    def preferred_nodes(self, group_files: Iterable[F]) -> list[_Node[F]]:
        """Nodes holding most of the group's bytes first, then the node whose job reads most of them, then
        the emptiest."""
        held: dict[str, int] = {}
        read: dict[str, int] = {}
        for lfn in group_files:
            node = self.where.get(lfn)
            if node is not None:
                held[node] = held.get(node, 0) + self.size(lfn)
            reader = self.readers.get(lfn)
            if reader is not None:
                read[reader] = read.get(reader, 0) + self.size(lfn)
        return sorted(self.nodes.values(), key=lambda n: (-held.get(n.name, 0), -read.get(n.name, 0), -n.free))

    def out_of_reach(self, size: int) -> bool:
        """True when no node can take ``size`` bytes, even by evicting: ``room_bound`` is an upper bound of a
        node's free plus evictable bytes for this and every later (lower) group."""
        return all(size > node.room_bound for node in self.nodes.values())

    def place_group(self, group: GroupCandidate[F], pending: list[F]) -> None:
        if self.out_of_reach(min(self.size(lfn) for lfn in pending)):
            return  # the common case of the groups below the cut: skip them cheaply
        need = sum(self.size(lfn) for lfn in pending)
        nodes = self.preferred_nodes(group.files)
        whole = [n for n in nodes if all(self.allowed(lfn, n.name) for lfn in pending)]
        target = next((n for n in whole if n.free >= need), None)
        if target is None:
            target = next((n for n in whole if self.make_room(n, need, group.score, group.group)), None)
        if target is not None:
            for lfn in pending:
                self.put(lfn, target)
            return
        for lfn in sorted(pending, key=self.size, reverse=True):
            self.place_file(lfn, self.preferred_nodes(group.files), group.score, group.group)

    def place_file(self, lfn: F, nodes: list[_Node[F]], group_score: float | None, group: Hashable = None) -> bool:
        """Put one file on the first node of ``nodes`` with room (evicting only if ``group_score`` is given)."""
        size = self.size(lfn)
        candidates = [n for n in nodes if self.allowed(lfn, n.name)]
        target = next((n for n in candidates if n.free >= size), None)
        if target is None and group_score is not None:
            target = next((n for n in candidates if self.make_room(n, size, group_score, group)), None)
        if target is None:
            return False
        self.put(lfn, target)
        return True


def _bytes(size: int | None, unknown_size: int) -> int:
    """The bytes a file is counted for: its size, or ``unknown_size`` when it is not known."""
    return unknown_size if size is None else max(0, int(size))


def file_scores(groups: Iterable[GroupCandidate[F]]) -> dict[F, float]:
    """The group max rule: each file's score is the best score among the groups that contain it."""
    scores: dict[F, float] = {}
    for group in groups:
        for lfn in group.files:
            if group.score > scores.get(lfn, -1.0):
                scores[lfn] = group.score
    return scores


def place(
    groups: Iterable[GroupCandidate[F]],
    sizes: Mapping[F, int | None],
    capacities: Mapping[str, int],
    current: Mapping[F, str],
    *,
    hysteresis: float = 2.0,
    excluded: Mapping[F, Collection[str]] | None = None,
    unknown_size: int = 1 << 30,
    current_scores: Mapping[F, float] | None = None,
    readers: Mapping[F, str] | None = None,
    movable: Collection[F] = frozenset(),
    admit: Callable[[Hashable, list[F]], bool] | None = None,
    window: float = 1.0,
) -> dict[F, str]:
    """The new placement ``{lfn: node}``; see the module docstring for the rules.

    ``sizes`` maps LFN to bytes (``None`` or missing: counted as
    ``unknown_size``); ``capacities`` maps each live cache node to the bytes
    it may hold; ``current`` is the placement of the previous cycle;
    ``excluded`` maps an LFN to the nodes that released it; ``hysteresis``
    (>= 1) is how many times better a file must score to displace one in place.

    With ``current_scores`` (the scores of the placed files, on the groups'
    scale) ``groups`` are only the groups whose scores rose since
    ``current`` was computed: pass 1 keeps every placed file as usual, pass 2
    runs for those groups only, and pass 3 offers the space left to their
    files and to the files pass 2 evicted.  The work is then proportional to
    what is placed plus what changed, not to every candidate; a full run now
    and then catches up with the rest (e.g. a group that fits in space an
    eviction left).

    ``readers`` maps a file that a job reads from storage now to that job's
    node: pass 2 prefers that node for the file's group after the nodes that
    hold the group, and pass 1 moves a placed file there when it is in
    ``movable`` (not copied yet: its copy is deferred, so the move costs
    nothing; see :mod:`~htda.coordinator.reads`).

    ``admit`` is an admission filter (:mod:`~htda.coordinator.admission`): ``admit(group, victims)`` is asked
    before a group evicts placed files in pass 2, and the group goes without them if it says no.  The best
    groups whose bytes fill ``window`` of the capacity (W-TinyLFU's window) are not asked.
    """
    return _plan(groups, sizes, capacities, current, hysteresis=hysteresis, excluded=excluded,
                 unknown_size=unknown_size, current_scores=current_scores, readers=readers, movable=movable,
                 admit=admit, window=window).where


def _plan(groups: Iterable[GroupCandidate[F]], sizes: Mapping[F, int | None], capacities: Mapping[str, int],
          current: Mapping[F, str], *, hysteresis: float, excluded: Mapping[F, Collection[str]] | None,
          unknown_size: int, current_scores: Mapping[F, float] | None, readers: Mapping[F, str] | None,
          movable: Collection[F], admit: Callable[[Hashable, list[F]], bool] | None,
          window: float) -> _Planner[F]:
    """:func:`place`'s three passes; the planner they leave (its ``where`` is the placement)."""
    if hysteresis < 1.0:
        raise ValueError("hysteresis must be >= 1")
    ordered = sorted(groups, key=lambda g: -g.score)
    scores = file_scores(ordered)
    if current_scores is not None:
        scores = {**current_scores, **{lfn: s for lfn, s in scores.items() if s > current_scores.get(lfn, -1.0)}}
    readers = readers or {}
    planner = _Planner(capacities, sizes, scores, excluded or {}, hysteresis, unknown_size, current, readers, admit)
    follow = {lfn: node for lfn, node in readers.items() if lfn in movable}
    _keep(planner, _follow_readers(planner, current, follow), scores, drop_unscored=current_scores is None)
    _place_groups(planner, ordered, window * planner.capacity)
    if current_scores is None:
        _fill(planner, scores, scores)
    else:
        _fill(planner, _fill_order(ordered, planner.evicted), scores)
    return planner


class Placer(Generic[F]):
    """A placement kept from one work cycle to the next, so that re-placing what changed costs what changed.

    :meth:`place` computes a placement as :func:`place` does, and keeps what its passes built: each node's
    files, free space and eviction order.  :meth:`update` then places the groups whose scores rose since, as
    :func:`place` with ``current_scores`` would, but without keeping every placed file again (pass 1) or
    comparing two whole placements: it answers the moves.  With a million placed files that pass 1 and
    comparison were most of an incremental cycle.

    An update holds only while the other inputs of the last :meth:`place` hold: the same capacities, sizes,
    releases and readers, and scores on the same scale (the coordinator places in full when one changes).
    The cycle thread owns a placer; readers get copies of :attr:`where`.
    """

    def __init__(self) -> None:
        self._planner: _Planner[F] | None = None

    @property
    def ready(self) -> bool:
        """True once a placement was computed (:meth:`update` needs one)."""
        return self._planner is not None

    @property
    def where(self) -> Mapping[F, str]:
        """The placement ``{lfn: node}`` (changed in place by :meth:`update`)."""
        return self._planner.where if self._planner is not None else {}

    def free(self) -> dict[str, int]:
        """The bytes of each node's capacity that the placement leaves free."""
        return {name: node.free for name, node in self._planner.nodes.items()} if self._planner else {}

    def place(self, groups: Iterable[GroupCandidate[F]], sizes: Mapping[F, int | None],
              capacities: Mapping[str, int], current: Mapping[F, str], *, hysteresis: float = 2.0,
              excluded: Mapping[F, Collection[str]] | None = None, unknown_size: int = 1 << 30,
              readers: Mapping[F, str] | None = None, movable: Collection[F] = frozenset(),
              admit: Callable[[Hashable, list[F]], bool] | None = None, window: float = 1.0) -> Mapping[F, str]:
        """A full placement, as :func:`place` (without ``current_scores``); it is kept for :meth:`update`."""
        self._planner = None  # the last one goes first: two at once would double the cycle's peak memory
        planner = _plan(groups, sizes, capacities, current, hysteresis=hysteresis, excluded=excluded,
                        unknown_size=unknown_size, current_scores=None, readers=readers, movable=movable,
                        admit=admit, window=window)
        # only placed files are looked up again (an update scores and sizes its own candidates)
        planner.scores = {lfn: planner.scores[lfn] for lfn in planner.where}
        planner.size_of = {lfn: planner.size_of[lfn] for lfn in planner.where}
        planner.next_run()  # the run's own record of moves is not kept: the caller compares the placements
        self._planner = planner
        return planner.where

    def update(self, groups: Iterable[GroupCandidate[F]], rescored: Mapping[F, float],
               sizes: Mapping[F, int | None], *, admit: Callable[[Hashable, list[F]], bool] | None = None,
               window: float = 1.0) -> dict[F, tuple[str | None, str | None]]:
        """Place ``groups``, the groups whose scores rose since the last run, and answer the moves
        ``{lfn: (old node, new node)}``.  ``rescored`` holds the new scores of their placed files (on the
        groups' scale; a placed file scores the better of it and its groups); ``sizes`` the sizes of
        their files not placed yet."""
        planner = self._planner
        if planner is None:
            raise RuntimeError("Placer.update before a first Placer.place")
        planner.next_run()
        planner.admit = admit
        ordered = sorted(groups, key=lambda g: -g.score)
        new_scores = file_scores(ordered)
        for lfn, score in new_scores.items():
            if lfn in planner.where:
                score = max(score, rescored.get(lfn, score))
                if score != planner.scores.get(lfn):
                    planner.rescore(lfn, score)
            else:
                planner.scores[lfn] = score
                if lfn not in planner.size_of:
                    planner.size_of[lfn] = _bytes(sizes.get(lfn), planner.unknown_size)
        _place_groups(planner, ordered, window * planner.capacity)
        _fill(planner, _fill_order(ordered, planner.evicted), planner.scores)
        return planner.moved()


def _place_groups(planner: _Planner[F], ordered: list[GroupCandidate[F]], window: float) -> None:
    """Pass 2: the groups, best first, each on as few nodes as possible (see the module docstring); the groups
    past the first ``window`` bytes face the admission filter."""
    where, size, seen = planner.where, planner.size, 0
    for group in ordered:
        if not planner.asking:
            seen += sum(map(size, group.files))
            planner.asking = seen > window
        pending = [lfn for lfn in group.files if lfn not in where]
        if pending:
            planner.place_group(group, list(dict.fromkeys(pending)))


def _fill_order(ordered: list[GroupCandidate[F]], evicted: list[F]) -> list[F]:
    """The files pass 3 considers after placing ``ordered``, once each, in an order fixed by the groups' order
    and the evictions': the fill sorts them by score only (a tie keeps this order), so a set here (whose order
    depends on how it was built and on the hash seed) let a kept placer's update and the full placement fill
    ties differently."""
    return list(dict.fromkeys([lfn for group in ordered for lfn in group.files] + evicted))


def _fill(planner: _Planner[F], files: Iterable[F], scores: Mapping[F, float]) -> None:
    """Pass 3: files still without a node take the space left, best first, without evicting."""
    by_free = sorted(planner.nodes.values(), key=lambda n: -n.free)
    most_free = max((n.free for n in by_free), default=-1)
    for lfn in sorted((f for f in files if f not in planner.where), key=lambda f: -scores[f]):
        if planner.size_of[lfn] <= most_free and planner.place_file(lfn, by_free, None):
            most_free = max(n.free for n in by_free)


def _follow_readers(planner: _Planner[F], current: Mapping[F, str], readers: Mapping[F, str]) -> Mapping[F, str]:
    """``current`` with each placed file that a live node's job reads moved to that node, where it is allowed
    and fits beside what the node has (a file read elsewhere never displaces a copy)."""
    wanted = {lfn: node for lfn, node in readers.items()
              if lfn in current and current[lfn] != node and node in planner.nodes and planner.allowed(lfn, node)}
    if not wanted:
        return current
    free = {name: node.free for name, node in planner.nodes.items()}
    for lfn, node in current.items():
        if node in free:
            free[node] -= planner.size_of[lfn]
    moved = {}
    for lfn, node in sorted(wanted.items()):
        if planner.size_of[lfn] <= free[node]:
            moved[lfn] = node
            free[node] -= planner.size_of[lfn]
            if current[lfn] in free:
                free[current[lfn]] += planner.size_of[lfn]
    return {**current, **moved}


def _keep(planner: _Planner[F], current: Mapping[F, str], scores: Mapping[F, float], drop_unscored: bool) -> None:
    """Pass 1: files stay where they are; a node that cannot hold all of its files any more keeps its best.

    With ``drop_unscored`` (a full placement, whose candidates include the group of every placed file) a
    placed file that no candidate names any more goes: nothing rates it (e.g. it was pinned, never read, and
    is pinned no longer)."""
    size_of, nodes, excluded = planner.size_of, planner.nodes, planner.excluded
    held: dict[str, list[F]] = {name: [] for name in nodes}
    # one pass over every placed file: the incremental cycle's largest cost, so no call per file
    for lfn, node_name in current.items():
        if drop_unscored and lfn not in scores:
            continue
        files = held.get(node_name)
        if files is not None and not (excluded and node_name in excluded.get(lfn, ())):
            files.append(lfn)
    for node_name, lfns in held.items():
        node = nodes[node_name]
        total = sum(map(size_of.__getitem__, lfns))
        if total <= node.free:  # the usual case: everything stays, in bulk
            kept = list(map(scores.get, lfns, repeat(0.0, len(lfns))))
            node.files.update(zip(lfns, kept))
            node.by_score.extend(zip(kept, lfns))
            node.free -= total
            planner.where.update(dict.fromkeys(lfns, node_name))
            continue
        lfns.sort(key=lambda lfn: -scores.get(lfn, 0.0))  # a shrunken node keeps its best
        for lfn in lfns:
            if node.free >= size_of[lfn]:
                planner.put(lfn, node)


def moves(old: Mapping[F, str], new: Mapping[F, str]) -> dict[F, tuple[str | None, str | None]]:
    """Files whose node changed between two placements: ``{lfn: (old node, new node)}``."""
    return {lfn: (old.get(lfn), new.get(lfn)) for lfn in old.keys() | new.keys() if old.get(lfn) != new.get(lfn)}

"""The coordinator's in-memory rating state, rebuilt from the database at start-up.

It holds the rating policy's key per group, the group membership, and per
file the best key among its groups (the group max rule).  Keys of every
shipped policy only grow with new accesses, so a file's key is updated
incrementally: when a group was accessed (or gained files) since the last
refresh, its key is pushed to its files — nothing else is looked at.

Per file it keeps machine numbers in arrays indexed by the file id, the
membership in CSR-like arrays, and only the LFNs the assignment lists need
(:mod:`.columns`): about 30 bytes a file instead of ~600 (issue 18).
"""

from __future__ import annotations

import heapq
import math
import threading
from collections.abc import Iterable, Mapping
from operator import itemgetter

import numpy as np

from .admission import TinyLFUAdmission
from .columns import Column, LfnCache, Membership, SizeColumn
from .placement import GroupCandidate
from .rating import GIB, NEVER, RatingPolicy, normalised_key, score_of
from .store import Store

__all__ = ["RatingState"]

SCORE_MAX = 1e300  # JSON has no infinity: scores are clamped below it
#: most doublings a key may rise above the last full placement's best before scores on its scale could overflow
MAX_RISE = 512.0


class RatingState:
    """Group keys, membership, file keys and sizes; thread-safe through :attr:`lock`."""

    def __init__(self, policy: RatingPolicy[int], per_size: bool = False, unknown_size: int = GIB,
                 admission: TinyLFUAdmission | None = None):
        self.policy = policy
        self.admission = admission  # counts every group access too, when the coordinator filters admissions
        self.per_size = per_size
        self.unknown_size = unknown_size
        self.members = Membership()  # group -> its files, a sorted tuple
        self.lfns = LfnCache()  # the LFNs the assignment lists need; the rest from the database (rebuild())
        self.sizes = SizeColumn()
        self.file_keys = Column("d", NEVER)  # the best key among a file's groups
        self.best_group = Column("i", 0)  # the group that key is of (ids start at 1)
        self._grown: set[int] = set()  # groups that gained files since the last refresh
        self._changed: set[int] = set()  # groups refreshed since the last work cycle took them
        self.revision = 0  # counts size changes of known files (new files come with accessed groups)
        self.reference = NEVER  # the key that scores 1.0 in the placement's scale (the best candidate's)
        self._order: list[int] = []  # group ids by key, best first, as of the last candidates()
        self.pinned: set[int] = set()  # files placed first and never displaced, whatever their score
        self._first_access: dict[int, float] = {}  # groups accessed for the first time lately -> when
        # whether to note first accesses at all: only new_groups() reads them (the coordinator's first_read_wait);
        # untracked, the replayed history would note every group
        self.track_first_access = True
        self.task_groups: set[int] = set()  # groups seen as a task's (the union of its jobs' inputs), not as inputs
        # Guards every field above and the policy's keys: ingest (REST workers) and the cycle write under it.
        # Re-entrant: rebuild() and take_changed() call the other locked methods.  Single lookups (the
        # assignments' lfns/sizes/file_keys) do not take it.
        self.lock = threading.RLock()

    # -- feeding ------------------------------------------------------------------
    def add_files(self, files: dict[int, tuple[str, int | None]]) -> None:
        with self.lock:
            sizes = self.sizes
            if any(fid in sizes and sizes.get(fid) != size for fid, (_, size) in files.items()):
                self.revision += 1  # a known file changed size: placed bytes may not fit any more
            offer = self.lfns.offer
            for fid, (lfn, size) in files.items():
                offer(fid, lfn)
                sizes[fid] = size

    def add_members(self, pairs: Iterable[tuple[int, int]]) -> None:
        with self.lock:
            self._grown |= self.members.add(pairs)

    def add_accesses(self, accesses: Iterable[tuple[int, int | None, float]]) -> None:
        """Accesses as (input group, task group or None, time): one job start touches both groups."""
        with self.lock:
            access, key, first, tasks = self.policy.access, self.policy.key, self._first_access, self.task_groups
            track = self.track_first_access
            record = self.admission.record if self.admission is not None else None
            for input_group, task_group, t in accesses:
                if task_group is not None and task_group != input_group:
                    tasks.add(task_group)
                for gid in (input_group, task_group):
                    if gid is None:
                        continue
                    if track and key(gid) == NEVER:
                        first[gid] = t
                    access(gid, t)
                    if record is not None:
                        record(gid)

    def new_groups(self, since: float) -> set[int]:
        """Groups first accessed at ``since`` or later (older ones are forgotten here)."""
        with self.lock:
            self._first_access = {gid: t for gid, t in self._first_access.items() if t >= since}
            return set(self._first_access)

    def rebuild(self, store: Store) -> None:
        """Load everything from the database: the full rating (replays the whole history)."""
        with self.lock:
            self.lfns.fetch = store.lfns
            sizes = self.sizes
            sizes.reserve(store.max_file_id())
            self.file_keys.reserve(store.max_file_id())
            self.best_group.reserve(store.max_file_id())
            for fid, size in store.iter_sizes():
                sizes[fid] = size
            self.members.load(store.iter_members())  # every group's key is pushed to its files below
            self.add_accesses(store.iter_accesses())
            self.refresh()
            # every group is in _changed now: the first work cycle places everything anyway (a full one), and
            # the set would hold tens of bytes a group until then
            self._changed = set()

    def refresh(self) -> None:
        """Push the keys of groups touched since the last call to their files.

        Readers (admin queries, the dashboard) call this to see current scores; the groups it handles are
        kept for the next :meth:`take_changed`, so a read never hides a change from the work cycle."""
        with self.lock:
            touched = self.policy.take_touched() | self._grown
            self._grown = set()
            self._changed |= touched
            key_of, members, file_keys, best = self.policy.key, self.members, self.file_keys, self.best_group
            for gid in touched:
                key = key_of(gid)
                if key != NEVER:  # a file's key is NEVER already when none of its groups was accessed
                    best.set_many(file_keys.raise_to(members.get(gid, ()), key), gid)

    def take_changed(self) -> set[int]:
        """Refresh, then hand over every group touched since the last call: the work cycle's input."""
        with self.lock:
            self.refresh()
            changed, self._changed = self._changed, set()
            return changed

    # -- reading ------------------------------------------------------------------
    def size(self, fid: int) -> int:
        size = self.sizes.get(fid)
        return self.unknown_size if size is None else size

    def group_order_key(self, gid: int, key: float) -> float:
        """The ordering key of a group: its rating key, per GiB of its files when ``per_size``."""
        if not self.per_size:
            return key
        return normalised_key(key, sum(map(self.size, self.members.get(gid, ()))))

    def file_order_key(self, fid: int) -> float:
        key = self.file_keys.get(fid, NEVER)
        return normalised_key(key, self.size(fid)) if self.per_size else key

    def file_order_keys(self, fids: np.ndarray) -> np.ndarray:
        """:meth:`file_order_key` of many files at once (the work cycle's bulk path)."""
        with self.lock:  # the columns cannot grow while they are read in bulk
            keys = self.file_keys.take(fids)
            if not self.per_size:
                return keys
            sizes = self.sizes.take(fids)
        sizes = np.where(sizes < 0, self.unknown_size, sizes).astype(np.float64)  # absent or None: unknown
        with np.errstate(divide="ignore"):
            per_unit = np.where(sizes > 0, np.log2(sizes / GIB), 0.0)  # 0 bytes: one unit, as normalised_key
        return np.where(keys == NEVER, keys, keys - per_unit)

    def pinned_mask(self, fids: np.ndarray) -> np.ndarray:
        """Which of ``fids`` are pinned (under the lock: a pin changes the set in place)."""
        with self.lock:
            pinned = np.fromiter(self.pinned, dtype=np.int64, count=len(self.pinned))
        return np.isin(fids, pinned)

    def lists_by_node(self, placement: Mapping[int, str]) -> dict[str, list[int]]:
        """The placed files of each node, pinned first, then best first (equal keys in placement order)."""
        if not placement:
            return {}
        names = sorted(set(placement.values()))
        index = {name: i for i, name in enumerate(names)}
        fids = np.fromiter(placement.keys(), dtype=np.int64, count=len(placement))
        nodes = np.fromiter(map(index.__getitem__, placement.values()), dtype=np.int32, count=len(placement))
        keys = self.file_order_keys(fids)
        order = np.lexsort((-keys, ~self.pinned_mask(fids), nodes))  # stable: ties keep the placement's order
        fids, nodes = fids[order], nodes[order]
        parts = np.split(fids, np.searchsorted(nodes, np.arange(1, len(names))))
        return {name: part.tolist() for name, part in zip(names, parts) if len(part)}

    def score(self, key: float, now: float) -> float:
        return min(self.policy.score_of_key(key, now), SCORE_MAX)

    def candidates(self, budget: int, incumbents: Iterable[int]) -> list[GroupCandidate[int]]:
        """The best groups until their distinct files fill ``budget`` bytes, plus the best group of each
        incumbent file, plus each pinned file on its own with an infinite score.  Scores are relative to the
        best group (2 ** (key - best key)): their ratios are those of the real scores at any time, and none
        underflows."""
        with self.lock:
            keys = self.policy.keys()
            if self.per_size:
                order = [g for g, _ in sorted(((g, self.group_order_key(g, k)) for g, k in keys.items()),
                                              key=itemgetter(1), reverse=True)]
            else:
                order = self._sorted_groups(keys)
            size = self.size
            chosen: dict[int, float] = {}
            seen: set[int] = set()
            total = 0
            for gid in order:
                if total >= budget:
                    break
                files = self.members.get(gid)
                if not files:
                    continue
                chosen[gid] = self.group_order_key(gid, keys[gid])
                new = [fid for fid in files if fid not in seen]
                if new:
                    seen.update(new)
                    total += sum(map(size, new))
            for fid in set(incumbents).difference(seen):
                best = self.best_group.get(fid)
                if best is not None and best not in chosen:
                    chosen[best] = self.group_order_key(best, keys.get(best, NEVER))
            pins = [GroupCandidate(("pin", fid), math.inf, (fid,)) for fid in sorted(self.pinned)]
            if not chosen:
                return pins
            top = self.reference = max(chosen.values())
            return pins + [GroupCandidate(gid, _relative(key, top), self._files_of(gid)) for gid, key in chosen.items()]

    def changed_candidates(self, groups: Iterable[int]) -> tuple[list[GroupCandidate[int]], dict[int, float]] | None:
        """The given groups as candidates, and the scores of their files, on the scale of the last full
        placement (relative to :attr:`reference`, the best candidate's key then): the input of
        :meth:`~htda.coordinator.placement.Placer.update`.  None when a key outgrew that scale (scores past
        ``2 ** MAX_RISE``): time for a full placement, which sets a new reference."""
        with self.lock:
            keys = self.policy.keys()
            top = self.reference
            changed = {gid: self.group_order_key(gid, keys.get(gid, NEVER))
                       for gid in groups if self.members.count(gid)}
            if top == NEVER or max(changed.values(), default=top) - top > MAX_RISE:
                return None
            candidates = [GroupCandidate(gid, _relative(key, top), self._files_of(gid)) for gid, key in changed.items()]
            candidates += [GroupCandidate(("pin", fid), math.inf, (fid,)) for fid in self.pinned]
            fids = np.unique(np.fromiter((fid for gid in changed for fid in self._files_of(gid)), dtype=np.int64))
        file_keys = self.file_order_keys(fids)
        with np.errstate(over="ignore", invalid="ignore"):  # as _relative: NEVER scores 0, overflow inf
            relative = np.where(file_keys == NEVER, 0.0, np.power(2.0, file_keys - top))
        relative[self.pinned_mask(fids)] = math.inf
        return candidates, dict(zip(fids.tolist(), relative.tolist()))

    def _sorted_groups(self, keys: dict[int, float]) -> list[int]:
        """Groups by key, best first.  The list is kept from cycle to cycle: keys only grow, so re-sorting it is
        nearly linear (Timsort merges the few groups that moved)."""
        order = self._order
        if len(order) != len(keys):
            known = set(order)
            order.extend(g for g in keys if g not in known)
        try:
            order.sort(key=keys.__getitem__, reverse=True)
        except KeyError:  # a group was forgotten: start afresh
            order[:] = sorted(keys, key=keys.__getitem__, reverse=True)
        return order

    def _files_of(self, gid: int) -> tuple[int, ...]:
        """The files of a group in a fixed order (by id)."""
        files: tuple[int, ...] = self.members.get(gid)
        return files

    def hot_groups(self, n: int, among: Iterable[int] | None = None) -> list[GroupCandidate[int]]:
        """The ``n`` best input groups (a job's inputs; not tasks', which would count each job twice), as
        candidates scored relative to the best of them (their ratios are those of the real scores): what
        :func:`~htda.coordinator.replicas.replicate` shares out.

        ``among``: only these groups are ranked, not all of them.  Keys only grow, so the last cycle's hot
        groups and the groups re-keyed since (``take_changed``; every group after an adaptive switch) hold the
        ``n`` best: the incremental cycle ranks thousands instead of millions."""
        with self.lock:
            keys, members, tasks = self.policy.keys(), self.members, self.task_groups
            ranked: Iterable[tuple[int, float]] = keys.items() if among is None else \
                ((gid, keys[gid]) for gid in among if gid in keys)
            if self.per_size:
                ranked = ((gid, self.group_order_key(gid, key)) for gid, key in ranked)
            best = heapq.nlargest(n, ((gid, key) for gid, key in ranked if gid not in tasks and members.count(gid)),
                                  key=itemgetter(1))
            if not best:
                return []
            top = best[0][1]
            return [GroupCandidate(gid, _relative(key, top), self._files_of(gid)) for gid, key in best]

    def top_groups(self, n: int, now: float) -> list[tuple[int, float, int]]:
        """(group id, score, number of files) of the ``n`` best groups."""
        with self.lock:
            best = heapq.nlargest(n, self.policy.keys().items(), key=itemgetter(1))
            return [(gid, self.score(key, now), self.members.count(gid)) for gid, key in best]

    def top_files(self, n: int, now: float) -> list[tuple[int, float]]:
        """(file id, score) of the ``n`` best files."""
        with self.lock:
            self.refresh()
            best = heapq.nlargest(n, self.file_keys, key=self.file_order_key)
            return [(fid, self.score(self.file_order_key(fid), now)) for fid in best]


def _relative(key: float, reference: float) -> float:
    """``2 ** (key - reference)``: a score on the placement's scale (0.0 for a group never accessed)."""
    return 0.0 if key == NEVER else score_of(key - reference)

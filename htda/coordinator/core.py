"""The coordinator's logic without the node around it: ingest, the work cycle, the assignment lists.

:class:`Coordinator` ties the database (:mod:`.store`), the in-memory rating
(:mod:`.state`) and the placement (:mod:`.placement`) together.  The node
component feeds it requests and the pool's cache nodes; the benchmark and
the tests drive it directly.  Everything it keeps in memory is rebuilt from
the database by :meth:`Coordinator.load`, so a restarted coordinator hands
out the same assignments after its first cycle.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Collection, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from ..node.clock import SYSTEM_CLOCK, Clock
from ..protocol import coordinator as proto
from .adaptive import AdaptiveLRFUPolicy, placement_admission
from .admission import make_admission
from .placement import GroupCandidate, Placer, moves
from .rating import RatingPolicy
from .reads import StorageReads
from .replicas import group_holders, replicate
from .state import RatingState
from .store import EventResult, IngestResult, JobRecord, Store

__all__ = ["CacheNode", "Coordinator", "CycleReport"]

#: files of one report whose jobs' other inputs are looked up (each is one query)
MAX_EXPANDED_READS = 256

#: the hot groups whose scores replicas are shared out by: this many per cache node, at least HOT_GROUPS_MIN
HOT_GROUPS_PER_NODE = 8
HOT_GROUPS_MIN = 64

#: the hot input groups a cache node is told it holds whole (so it publishes their keys in its machine ad)
GROUPS_PER_NODE = 64

log = logging.getLogger("htda.coordinator")


@dataclass(frozen=True)
class CacheNode:
    """A live cache node as its heartbeat describes it."""

    name: str
    url: str
    capacity_bytes: int
    free_bytes: int | None = None


@dataclass
class CycleReport:
    """What one work cycle did (logged, counted in metrics, returned by tests)."""

    cycle: int
    kind: str  # "full" (every candidate placed), "changes" (only the groups accessed since), "unchanged"
    groups_rekeyed: int
    candidates: int
    placed: int
    moved: int
    seconds: float


class Coordinator:
    """Job history in, per-node assignment lists out."""

    def __init__(self, store: Store, policy: RatingPolicy[int], *, per_size: bool = False, hysteresis: float = 2.0,
                 fill: float = 0.95, candidate_factor: float = 1.5, unknown_size: int = 1 << 30,
                 release_ttl: float = 3600.0, full_every: int = 10, max_defer: float = 600.0,
                 first_read_wait: float = 0.0, max_copies: int = 1, replica_headroom: float = 2.0,
                 admission: str = "tinylfu", clock: Clock = SYSTEM_CLOCK):
        self.store = store
        self.clock = clock  # the time of a cycle, an assignment or a query when the caller names none
        self.reads = StorageReads(max_defer)
        self.first_read_wait = first_read_wait
        self.admission = make_admission(admission)
        self.state = RatingState(policy, per_size=per_size, unknown_size=unknown_size, admission=self.admission)
        self.state.lfns.fetch = store.lfns  # LFNs not in the assignment lists are read from the database
        self.state.track_first_access = first_read_wait > 0
        self._sample = [0, 0, 0]  # accesses, their bytes and the bytes placed when they came: the window's climbing
        self.hysteresis = hysteresis
        self.fill = fill
        self.candidate_factor = candidate_factor
        self.release_ttl = release_ttl
        self.cycle = 0
        self.placement: dict[int, str] = {}
        self.lists: dict[str, list[int]] = {}  # node -> file ids, best first
        self.max_copies, self.replica_headroom = max_copies, replica_headroom
        self.replicas: dict[int, tuple[str, ...]] = {}  # file id -> nodes holding a replica (second copy first)
        self.replica_lists: dict[str, list[tuple[int, int]]] = {}  # node -> (file id, which copy it is)
        self._hot: list[GroupCandidate[int]] = []  # the last cycle's hot input groups, best first
        self.node_groups: dict[str, list[tuple[int, ...]]] = {}  # node -> files of the hot groups it is given whole
        self.draining: set[str] = set()
        # One work cycle at a time: the htda-coordinator-cycle thread and POST /coordinator/cycle.  placement,
        # lists, replicas, replica_lists, node_groups, cycle and the _hot/_last_inputs/_since_full bookkeeping are
        # written under it; the five maps are replaced whole, never changed in place, so readers (assignments,
        # admin queries) take no lock.
        self._cycle_lock = threading.Lock()
        self._last_inputs: tuple | None = None  # what the last placement was computed from
        self._last_candidates = 0
        self._since_full = 0  # cycles placed incrementally since the last full placement
        self._placer: Placer[int] = Placer()  # the cycle's own (under _cycle_lock); placement is a copy of its map
        self.full_every = full_every

    # -- start-up -------------------------------------------------------------------
    def load(self) -> float:
        """Rebuild the memory from the database (the full rating cycle); return the seconds it took."""
        started = time.perf_counter()
        with self._cycle_lock:  # what a cycle kept from before (a leader that lost the lock and took it back)
            self._placer, self._last_inputs = Placer(), None
        self.placement = self.store.placement()
        if self.admission is not None:
            self.admission.ensure_width(len(self.placement))  # before the history fills its sketch
        self.state.rebuild(self.store)
        self.cycle = self.store.cycle()
        self.draining = {row["name"] for row in self.store.nodes() if row["draining"]}
        self.state.pinned = self.store.pins()
        self._build_lists()
        return time.perf_counter() - started

    # -- ingest -----------------------------------------------------------------------
    def submit_jobs(self, jobs: Sequence[JobRecord]) -> IngestResult:
        result = self.store.ingest_jobs(jobs)
        if result.files:
            self.state.add_files(result.files)
        if result.members:
            self.state.add_members(result.members)
        if result.accesses:
            self.state.add_accesses(result.accesses)
            self._sample_hits(result.accesses)
        return result

    def report_events(self, events: Sequence[dict[str, Any]]) -> EventResult:
        result = self.store.record_events(events)
        if result.accesses:
            self.state.add_accesses(result.accesses)
            self._sample_hits(result.accesses)
        return result

    def _sample_hits(self, accesses: Sequence[tuple[int, int | None, float]]) -> None:
        """Count how many of the accessed input groups' bytes were placed (the hits of the admission window's
        hill climbing); a full sample adapts the window (:class:`~htda.coordinator.admission.WindowClimber`)."""
        admission = self.admission
        if admission is None:
            return
        state, placement, sample = self.state, self.placement, self._sample
        with state.lock:
            for gid, _, _ in accesses:
                for fid in state.members.get(gid, ()):
                    size = state.size(fid)
                    sample[0] += 1
                    sample[1] += size
                    if fid in placement:
                        sample[2] += size
            if sample[0] >= admission.sample_size:
                admission.sampled(sample[2] / sample[1] if sample[1] else 0.0)
                sample[:] = [0, 0, 0]

    def _admit(self, group: Hashable, victims: list[int]) -> bool:
        """The admission filter's verdict on ``group`` displacing ``victims`` (placed files: their best groups
        are asked); pins are always admitted."""
        if self.admission is None or not isinstance(group, int):
            return True
        best = self.state.best_group
        return self.admission.admit(group, [g for g in map(best.get, victims) if g is not None])

    def release(self, node: str, lfns: Sequence[str], reason: str | None, now: float | None = None) -> int:
        """A node gave files back: they are placed elsewhere, and not on that node for ``release_ttl``."""
        ids = self.store.file_ids(lfns)
        self.store.add_releases(node, ids.values(), self._now(now) + self.release_ttl, reason)
        return len(ids)

    def set_draining(self, node: str, draining: bool) -> bool:
        if not self.store.set_draining(node, draining):
            return False
        (self.draining.add if draining else self.draining.discard)(node)
        return True

    def pin(self, lfns: Sequence[str], groups: Sequence[str], pin: bool) -> proto.PinAnswer:
        """Pin (or unpin) files and the files of groups (by name); pinned files are placed first, never
        displaced.  Unknown LFNs are recorded when pinned; unknown groups are named in the answer."""
        created, ids, unknown = self.store.set_pins(lfns, groups, pin)
        self.state.add_files(created.files)
        with self.state.lock:
            if pin:
                self.state.pinned |= ids
            else:
                self.state.pinned -= ids
        return proto.PinAnswer(files=len(ids), pinned=len(self.state.pinned), unknown_groups=unknown)

    def node_restarted(self, node: str) -> None:
        """A cache node came back (maybe with new disks): its releases no longer hold."""
        self.store.clear_releases(node)

    # -- the work cycle ---------------------------------------------------------------
    def run_cycle(self, nodes: Sequence[CacheNode], now: float | None = None, full: bool = False) -> CycleReport:
        """Rate what changed, pick and place the files worth caching, rebuild the assignment lists (``full``:
        place every candidate again, whatever changed)."""
        now = self._now(now)
        with self._cycle_lock:
            started = time.perf_counter()
            self.store.save_nodes([{"name": n.name, "url": n.url, "capacity_bytes": n.capacity_bytes,
                                    "free_bytes": n.free_bytes, "last_seen": now} for n in nodes])
            capacities = {n.name: int(n.capacity_bytes * self.fill) for n in nodes if n.name not in self.draining}
            touched = self.state.take_changed()
            rekeyed = len(touched)
            excluded = self.store.releases(now)
            readers, movable = self._readers(now)
            waiting = self._waiting_for_reader(now, readers)
            if waiting:
                excluded = {**excluded, **{fid: set(capacities) for fid in waiting}}
            inputs = (sorted(capacities.items()), sorted((fid, sorted(nodes)) for fid, nodes in excluded.items()),
                      sorted(self.state.pinned), self.state.revision, sorted(readers.items()), sorted(movable))
            if full:
                self._last_inputs = None
            kind, changes = self._place(touched, inputs, capacities, excluded, readers, movable)
            new = self.placement if not changes else dict(self._placer.where)  # a copy: the placer changes its own
            if kind != "unchanged":
                self._hot = self._hot_groups(len(capacities), touched if kind == "changes" else None)
            replicas = self.replicas if kind == "unchanged" else self._replicate(new, capacities, excluded)
            self.cycle += 1
            self.store.save_placement({fid: after for fid, (_, after) in changes.items()}, self.cycle)
            if changes or rekeyed or inputs != self._last_inputs or replicas != self.replicas:
                self.placement, self.replicas = new, replicas
                self._build_lists()
            self._last_inputs = inputs
            report = CycleReport(self.cycle, kind, rekeyed, self._last_candidates, len(new), len(changes),
                                 time.perf_counter() - started)
        log.info("cycle %d (%s): %d groups re-keyed, %d candidate groups, %d files placed, %d moved, %.3f s",
                 report.cycle, kind, report.groups_rekeyed, report.candidates, report.placed, report.moved,
                 report.seconds)
        return report

    def _place(self, touched: set[int], inputs: tuple, capacities: Mapping[str, int],
               excluded: Mapping[int, Collection[str]], readers: Mapping[int, str],
               movable: Collection[int]) -> tuple[str, dict[int, tuple[str | None, str | None]]]:
        """(the kind of placement this cycle, the moves): none when nothing it depends on changed; only the
        groups re-keyed since when only they changed (the placer keeps the rest); else every candidate."""
        same = inputs == self._last_inputs
        if same and not touched:
            return "unchanged", {}
        changed = self.state.changed_candidates(touched) \
            if same and self._since_full < self.full_every and self._placer.ready else None
        if changed is not None:
            groups, rescored = changed
            self._last_candidates = len(groups)
            self._since_full += 1
            return "changes", self._placer.update(groups, rescored, self.state.sizes, **self._admission_options())
        budget = int(sum(capacities.values()) * self.candidate_factor)
        groups = self.state.candidates(budget, self.placement) if capacities else []
        new = self._placer.place(groups, self.state.sizes, capacities, self.placement, hysteresis=self.hysteresis,
                                 excluded=excluded, unknown_size=self.state.unknown_size, readers=readers,
                                 movable=movable, **self._admission_options())
        self._last_candidates = len(groups)
        self._since_full = 0
        return "full", moves(self.placement, new)

    def _hot_groups(self, nodes: int, rekeyed: set[int] | None) -> list[GroupCandidate[int]]:
        """The hot input groups, best first (what replicas share out, and the groups nodes publish); ``rekeyed``:
        the groups re-keyed since the last cycle, ranked with the last hot ones (None: rank all)."""
        among = None if rekeyed is None else rekeyed.union(cast(int, group.group) for group in self._hot)
        return self.state.hot_groups(max(HOT_GROUPS_MIN, HOT_GROUPS_PER_NODE * nodes), among)

    def _replicate(self, placement: Mapping[int, str], capacities: Mapping[str, int],
                   excluded: Mapping[int, Collection[str]]) -> dict[int, tuple[str, ...]]:
        """More copies of the hot groups in the room the placement left (:mod:`~htda.coordinator.replicas`)."""
        if self.max_copies <= 1 or len(capacities) <= 1:
            return {}
        return replicate(self._hot, placement, self.state.size, capacities, max_copies=self.max_copies,
                         headroom=self.replica_headroom, current=self.replicas, excluded=excluded,
                         room=self._placer.free())

    def _admission_options(self) -> dict[str, Any]:
        """``place``'s admission arguments; the sketch is first sized to the placed files (at least as many as their
        groups; growing it starts its counts afresh, so it is sized at start-up too).  Without a filter an adaptive
        rating may ask its own question, of every group, or put new groups on probation, as its layout says
        (:func:`~.adaptive.placement_admission`)."""
        if self.admission is None:
            policy = self.state.policy
            if isinstance(policy, AdaptiveLRFUPolicy):
                return placement_admission(policy, self.state.best_group.get)
            return {}
        self.admission.ensure_width(len(self.placement))
        return {"admit": self._admit, "window": self.admission.window}

    def _readers(self, now: float) -> tuple[dict[int, str], set[int]]:
        """(file id -> the node whose job reads it from storage now, the ids of those whose copies are
        deferred: nothing of them is copied yet, so they may move to their reader)."""
        by_lfn = self.reads.readers(now)
        if not by_lfn:
            return {}, set()
        ids = self.store.file_ids(by_lfn)
        deferred = self.reads.deferred(now)
        return {fid: by_lfn[lfn] for lfn, fid in ids.items()}, {fid for lfn, fid in ids.items() if lfn in deferred}

    def _waiting_for_reader(self, now: float, readers: Mapping[int, str]) -> set[int]:
        """Files of groups first wanted less than ``first_read_wait`` ago that are not placed and of which no
        job reads a file yet: where the group's first job runs is not known, and a copy there can take what
        that job reads from the worker's read-through cache, where a copy elsewhere would fetch it again over
        the storage link beside the job (docs/coordinator.rst)."""
        if self.first_read_wait <= 0:
            return set()
        state, waiting = self.state, set()
        with state.lock:
            for gid in state.new_groups(now - self.first_read_wait):
                files = state.members.get(gid, ())
                if not any(fid in readers or fid in self.placement or fid in state.pinned for fid in files):
                    waiting.update(files)
        return waiting

    def _build_lists(self) -> None:
        # the LFNs of the files in the lists are kept in memory (the assignments name them); no others
        self.state.lfns.retain(set(self.placement).union(self.replicas, self.state.pinned))
        lists = self.state.lists_by_node(self.placement)
        order = self.state.file_order_key
        replica_lists: dict[str, list[tuple[int, int]]] = {}
        for fid, nodes in self.replicas.items():
            for copy, node in enumerate(nodes, start=2):
                replica_lists.setdefault(node, []).append((fid, copy))
        for entries in replica_lists.values():
            entries.sort(key=lambda entry: order(entry[0]) - math.log2(entry[1]), reverse=True)
        node_groups: dict[str, list[tuple[int, ...]]] = {}
        for group in self._hot:
            for node in group_holders(group.files, self.placement, self.replicas):
                held = node_groups.setdefault(node, [])
                if len(held) < GROUPS_PER_NODE:
                    held.append(group.files)
        self.lists, self.replica_lists, self.node_groups = lists, replica_lists, node_groups

    # -- answers ----------------------------------------------------------------------
    def report_reads(self, node: str, lfns: list[str], ttl: float, now: float | None = None) -> None:
        """A cache node's report of the files its jobs read from storage.  A file is deferred while the latest
        job that named it is the only job of its inputs so far, and the other inputs of that job with it
        (see :mod:`~htda.coordinator.reads`)."""
        ids = self.store.file_ids(lfns[:MAX_EXPANDED_READS])
        groups = self.store.latest_input_groups(ids.values())
        jobs = self.store.jobs_per_input_group(groups.values())
        first = {gid for gid in set(groups.values()) if jobs.get(gid, 0) <= 1}
        state = self.state
        with state.lock:
            files = {fid for gid in first for fid in state.members.get(gid, ())}
        deferred = set(state.lfns.many(files).values())
        self.reads.report(node, lfns, ttl, self._now(now), deferred)

    def assignments(self, node: str, now: float | None = None) -> proto.Assignments:
        """The full list of files ``node`` should hold, best first (the pull contract).

        ``defer`` marks files that jobs read from storage now (see :mod:`~htda.coordinator.reads`):
        the node keeps room for them but starts their copies only once the reading stops.
        """
        now = self._now(now)
        state = self.state
        fids = self.lists.get(node, ())
        deferred = self.reads.deferred(now)
        lfns, sizes, order, score, pinned = state.lfns, state.sizes, state.file_order_key, state.score, state.pinned
        scores = [score(order(fid), now) for fid in fids]
        if pinned:  # pinned files lead the list: they score as the node's best file, so the order stays by score
            best = max((s for fid, s in zip(fids, scores) if fid not in pinned), default=0.0)
            scores = [max(s, best) if fid in pinned else s for fid, s in zip(fids, scores)]
        entry = proto.AssignedFile
        files = [entry(lfn=(lfn := lfns[fid]), score=s, size=sizes.get(fid), source=None, defer=lfn in deferred)
                 for fid, s in zip(fids, scores)]
        replicas = self._replica_entries(node, now)
        files += [entry for _, entry in replicas]
        return proto.Assignments(node=node, cycle=self.cycle, files=files, draining=node in self.draining,
                                 groups=self._group_positions(node, [*fids, *(fid for fid, _ in replicas)]))

    def _group_positions(self, node: str, listed: Sequence[int]) -> list[list[int]]:
        """The hot input groups ``node`` is given whole, as the positions of their files in its list."""
        groups = self.node_groups.get(node)
        if not groups:
            return []  # most pulls: no positions to map
        position = {fid: i for i, fid in enumerate(listed)}
        out = []
        for files in groups:
            where = [position.get(fid) for fid in files]
            if None not in where:
                out.append(cast(list[int], where))
        return out

    def _replica_entries(self, node: str, now: float) -> list[tuple[int, proto.AssignedFile]]:
        """The replicas ``node`` should hold, as (file id, entry): the k-th copy of a file scores 1/k of it
        (replicas go first when room is short), and comes from the nodes holding the others, never from storage."""
        state, placement, replicas = self.state, self.placement, self.replicas
        out = []
        for fid, copy in self.replica_lists.get(node, ()):
            primary = placement.get(fid)
            if primary is None:
                continue
            peers = [primary, *(n for n in replicas.get(fid, ()) if n != node)]
            score = state.score(state.file_order_key(fid), now) / copy
            out.append((fid, proto.AssignedFile(lfn=state.lfns[fid], score=score, size=state.sizes.get(fid),
                                                source=None, defer=False, peers=peers, peers_only=True)))
        return out

    # -- admin queries (the REST handlers' only way in) --------------------------------------
    def top_files(self, n: int, now: float | None = None) -> list[proto.TopFile]:
        """The ``n`` best-rated files: LFN, score, size and the node they are placed on."""
        state = self.state
        best = state.top_files(n, self._now(now))
        lfns = state.lfns.many(fid for fid, _ in best)
        return [proto.TopFile(lfn=lfns[fid], score=score, size=state.sizes.get(fid), node=self.placement.get(fid))
                for fid, score in best]

    def top_groups(self, n: int, now: float | None = None) -> list[proto.TopGroup]:
        """The ``n`` best-rated groups: name and kind (from the database), score and number of files."""
        best = self.state.top_groups(n, self._now(now))
        names = self.store.groups_info(gid for gid, _, _ in best)
        return [proto.TopGroup(**names.get(gid, {"id": gid, "name": None, "kind": None}), score=score, files=count)
                for gid, score, count in best]

    def file_info(self, lfn: str, limit: int, now: float | None = None) -> proto.FileInfo | None:
        """One file: size, score, node, its groups by score and its last ``limit`` jobs; None if unknown."""
        fid = self.store.file_ids([lfn]).get(lfn)
        if fid is None:
            return None
        now = self._now(now)
        history = self.store.file_history(fid, limit)
        state = self.state
        state.refresh()
        groups = [proto.GroupInfo(**info, score=state.score(state.policy.key(gid), now))
                  for gid, info in self.store.groups_info(history["groups"]).items()]
        return proto.FileInfo(lfn=lfn, size=state.sizes.get(fid), score=state.score(state.file_order_key(fid), now),
                              node=self.placement.get(fid), groups=sorted(groups, key=lambda g: -g.score),
                              accesses=history["accesses"], recent=[proto.Access(**row) for row in history["recent"]])

    def pinned_files(self) -> list[proto.PinnedFile]:
        """Pinned files by LFN, with the node each is placed on."""
        state = self.state
        lfns = state.lfns.many(state.pinned)
        return sorted((proto.PinnedFile(lfn=lfns[fid], node=self.placement.get(fid)) for fid in state.pinned),
                      key=lambda f: f.lfn)

    def storage_reads(self, now: float | None = None) -> proto.StorageReads:
        """Files jobs read from storage now, by node, and the ones whose copies wait for those reads."""
        now = self._now(now)
        return proto.StorageReads(nodes=self.reads.snapshot(now), deferred=sorted(self.reads.deferred(now)),
                                  max_defer=self.reads.max_defer)

    def forget_reader(self, node: str) -> None:
        """A cache node left: its reports of storage reads no longer hold."""
        self.reads.forget(node)

    def sizes(self, now: float | None = None) -> dict[str, int]:
        """How much the coordinator tracks: rated groups, known, placed and deferred files (for metrics)."""
        return {"groups": len(self.state.policy), "files": len(self.state.sizes), "placed": len(self.placement),
                "replicas": sum(map(len, self.replicas.values())), "deferred": len(self.reads.deferred(self._now(now)))}

    def _now(self, now: float | None) -> float:
        """``now`` as the caller gave it, or the wall-clock time of this coordinator's clock."""
        return self.clock.time() if now is None else now

    def describe_database(self) -> str:
        """The database URL without its password, for logs."""
        return self.store.engine.url.render_as_string(hide_password=True)

    def close(self) -> None:
        self.store.close()

    def node_summary(self, live: Sequence[CacheNode]) -> list[proto.CacheNodeSummary]:
        """Per cache node: capacity report, live or not, draining, files and bytes assigned."""
        live_names = {n.name for n in live}
        out = []
        for row in self.store.nodes():
            name = row["name"]
            fids = self.lists.get(name, ())
            out.append(proto.CacheNodeSummary(
                name=name, url=row["url"], live=name in live_names, draining=name in self.draining,
                capacity_bytes=row["capacity_bytes"], free_bytes=row["free_bytes"], last_seen=row["last_seen"],
                assigned_files=len(fids), assigned_bytes=sum(self.state.size(f) for f in fids),
                replica_files=len(self.replica_lists.get(name, ()))))
        return out

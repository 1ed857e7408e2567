"""The cache's work: start-up recovery, the assignment cycle, staging, eviction.

Kept apart from the REST/plugin wiring in ``component.py`` so that the
logic reads top to bottom: pull the assignment, plan, evict, stage,
revalidate a few copies, refresh the view, report.  Its parts live beside
it: :mod:`.allocation` plans (what to copy, evict, release),
:mod:`.failures` keeps the failed copies and their back-off,
:mod:`.revalidation` checks copies again, :mod:`.releases` gives files back
to the coordinator, :mod:`.view` drives the union view, and
:mod:`.staging` makes one copy.

Threads: :meth:`CacheService.recover` runs at start, :meth:`~CacheService.apply`,
:meth:`~CacheService.revalidate_some` and :meth:`~CacheService.refresh_view` on
the ``htda-cache-cycle`` thread (or a REST worker asking for a cycle) and
:meth:`~CacheService.evict_on_request` on a REST worker, all under the
component's cycle lock; copies run on the ``htda-stage_N`` threads
(:meth:`~CacheService._stage`).  Times come from the ``clock`` passed in
(:mod:`htda.node.clock`).
"""

from __future__ import annotations

import logging
import os
import threading
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from ..lfn import normalize_lfn
from ..node.clock import SYSTEM_CLOCK, Clock
from ..protocol.base import unset_or
from ..protocol.coordinator import AssignedFile
from .allocation import Room, Wanted, holdable, plan
from .backends.base import CacheDevice, StorageBackend, StorageError
from .backends.logical import LogicalDevice
from .failures import Failures
from .index import Entry, Index, validate_found
from .peers import PeerSource
from .readers import open_lfns
from .releases import Releases
from .reporting import HoldingsReporter
from .revalidation import Revalidator
from .staging import PeersUnavailable, Stager, StagingCancelled, StagingError, StagingJob
from .union.base import UnionDriver
from .view import View

__all__ = ["CacheService", "Marks", "Assignment"]

log = logging.getLogger("htda.cache")

#: files read from storage reported at most per scan (a report stays well below the coordinator's max_batch)
MAX_REPORTED_READS = 10_000
#: peers of an assigned file looked at, at most
MAX_PEERS = 8


@dataclass(frozen=True)
class Marks:
    high: float
    low: float


@dataclass
class Assignment:
    """What a coordinator answered: the node's files (best first), and whether it drains."""

    files: list[AssignedFile]
    draining: bool
    coordinator: str
    cycle: int
    groups: list[list[int]] = field(default_factory=list)  # hot input groups given whole: positions in files


def _peers_of(f: AssignedFile) -> tuple[str, ...]:
    """The ``peers`` of an assignment entry: member names, each once, at most :data:`MAX_PEERS`."""
    names = (p for p in unset_or(f.peers, []) if 0 < len(p) <= 255)
    return tuple(dict.fromkeys(names))[:MAX_PEERS]


def _sources(job: StagingJob) -> str:
    """Where a copy's bytes came from, for the log: "storage", "peer:a" or "peer:a (N bytes), storage (M bytes)"."""
    parts = [(k, v) for k, v in job.source_bytes.items() if v]
    if len(parts) <= 1:
        return parts[0][0] if parts else "storage"
    return ", ".join(f"{k} ({v} bytes)" for k, v in parts)


class CacheService:
    """Everything the cache node does, without the REST layer."""

    def __init__(self, device: LogicalDevice, marks: dict[int, Marks], storages: Callable[[str | None], StorageBackend],
                 stager: Stager, reporter: HoldingsReporter, view: UnionDriver | None, config: dict[str, Any],
                 metrics: Any, peer_sources: Callable[[Sequence[str]], list[PeerSource]] | None = None,
                 clock: Clock = SYSTEM_CLOCK):
        self.device, self.marks, self.storage_for, self.stager = device, marks, storages, stager
        self.clock = clock
        #: the pool members of an assignment's ``peers`` that can be copied from now, as sources
        self.peer_sources = peer_sources or (lambda names: [])
        self.reporter, self.view, self.config = reporter, view, config
        #: the union view, as the service drives it (``self.view`` is its driver)
        self.viewer = View(view, config["report_reads"], self._job_opened, clock)
        self.index = Index()
        self.jobs: dict[str, StagingJob] = {}
        self.evictions: deque[dict[str, Any]] = deque(maxlen=200)
        self._sizes: dict[str, int] = {}
        self.open_files = {"cache": 0, "storage": 0}
        #: the files jobs on this worker had open from storage at the last scan (storage_reads; replaced whole)
        self.reading: list[str] = []
        # a copy starts once two assignments in a row name its file (the second without 'defer'): reports of
        # jobs reading it from storage elsewhere get a cycle to arrive before the link is spent on it
        self._last_assigned: set[str] = set()
        # jobs: the cycle and the staging threads change it under it (REST listings and gauges copy it without
        # it).  The cycle's own state (the releases, _sizes, _last_assigned) is under the component's cycle lock
        # instead; the failures and the view have their own locks.
        self._lock = threading.RLock()
        self._pool = ThreadPoolExecutor(max_workers=config["max_staging"], thread_name_prefix="htda-stage")
        self._init_metrics(metrics)
        #: failed copies and their back-off (staging threads and the cycle)
        self.failures = Failures(config["retry_delay"], config["max_attempts"], self.m_failures, clock)
        #: files given back to the coordinator, files an admin evicted (the cycle lock)
        self.releases = Releases(reporter, config["release_interval"], self.m_released, clock)
        #: copies checked again against their sources (the cycle)
        self.revalidator = Revalidator(self.index, storages, self.evict, config, clock)

    def _init_metrics(self, m: Any) -> None:
        self.m_staged_bytes = m.counter("htda_cache_staged_bytes_total", "bytes of validated copies made")
        self.m_peer_copied = m.counter("htda_cache_peer_copied_bytes_total", "bytes of validated copies made that "
                                       "came from other cache nodes' copies instead of storage")
        self.m_staged = m.counter("htda_cache_staged_files_total", "validated copies made")
        self.m_failures = m.counter("htda_cache_staging_failures_total", "copies that failed", ("kind",))
        self.m_evicted = m.counter("htda_cache_evictions_total", "copies removed, by reason", ("reason",))
        self.m_evicted_bytes = m.counter("htda_cache_evicted_bytes_total", "bytes of copies removed")
        self.m_released = m.counter("htda_cache_released_files_total", "files released to the coordinator")
        m.gauge("htda_cache_used_bytes", "bytes of copies held, by device", ("device",),
                callback=lambda: {d.path: self.index.used_bytes(d) for d in self.device.devices()})
        m.gauge("htda_cache_capacity_bytes", "bytes our copies may take under the high watermark (a file "
                "system several devices share counted once), by device", ("device",),
                callback=self.capacities)
        m.gauge("htda_cache_files", "copies held", callback=lambda: len(self.index))
        m.gauge("htda_cache_staging", "copies queued or in flight", callback=lambda: len(self.jobs))
        m.gauge("htda_cache_job_open_files", "files jobs on this worker have open through the view, by where "
                "they are read from (seen by the last scan; needs report_reads)", ("source",),
                callback=lambda: dict(self.open_files))
        self._job_opens = m.counter("htda_cache_job_opens_total", "files jobs opened through a mounted view, by "
                                    "where they were read from (fanotify; needs report_reads)", ("source",))
        self._job_open_bytes = m.counter("htda_cache_job_opened_bytes_total", "sizes of the files jobs opened "
                                         "through a mounted view, by where they were read from", ("source",))

    # -- start-up ----------------------------------------------------------------
    def recover(self) -> dict[str, int]:
        """Rebuild the index from the devices; drop what fails validation; start the view."""
        removed_temps = self.device.clean_temporaries()
        root = self.storage_for(None).root_perms()
        if root is not None:  # a union view shows the first device's root over storage's: the same perms
            self.device.set_root_perms(root)
        invalid: list[tuple[CacheDevice, str, str]] = []
        for dev in self.device.devices():
            for found in dev.scan():
                entry, reason = validate_found(found, dev, self._storage_of_meta(found.meta),
                                               self.config["verify_on_start"] == "checksum", self.clock.time())
                if entry is not None and found.lfn in self.index:
                    entry, reason = None, "a second copy on another device"  # one copy per LFN, or evictions miss one
                if entry is None:
                    invalid.append((dev, found.lfn, reason))
                else:
                    self.index.add(entry)
        for dev, lfn, reason in invalid:  # before the view starts, so a fresh view never shows them
            if lfn not in self.index:
                self.viewer.removing(lfn)
            dev.delete(lfn)
            self._record_eviction(lfn, 0, dev, f"invalid at start: {reason}")
        self.viewer.start(self._held_lfns())
        log.info("index rebuilt: %d valid copies kept, %d invalid dropped, %d temporaries removed",
                 len(self.index), len(invalid), removed_temps)
        return {"kept": len(self.index), "dropped": len(invalid), "temporaries": removed_temps}

    def _storage_of_meta(self, meta: dict[str, Any]) -> Callable[[str], StorageBackend]:
        source = meta.get("source_url") or None
        return lambda lfn: self.storage_for(source)

    def _held_lfns(self) -> list[str]:
        return [e.lfn for e in self.index.entries()]

    @property
    def view_error(self) -> str:
        """Why the union view is not available ("" while it is, or without one)."""
        return self.viewer.error

    def _job_opened(self, path: str, size: int, seen: float) -> None:
        """Count one open a job made through the view, as read from the copy or from storage: from the copy
        when the view served one by ``seen`` (the open happened no later; a copy landing while its event waited
        to be handled would otherwise count an open of storage as a hit)."""
        lfn = self.view.lfn_of(path) if self.view is not None else None
        if lfn is not None:
            source = "cache" if self.index.served_at(lfn, seen) else "storage"
            self._job_opens.inc(source=source)
            self._job_open_bytes.inc(size, source=source)

    def refresh_view(self) -> None:
        """Once per cycle: let the view catch up with this cycle's changes (see :class:`.view.View`)."""
        self.viewer.refresh(self._held_lfns)

    # -- the cycle ---------------------------------------------------------------------
    def apply(self, assignment: Assignment) -> dict[str, int]:
        """Plan and start this cycle's work for ``assignment``; return counts of what was done."""
        wanted = self._wanted(assignment.files)
        with self._lock:
            in_flight = {lfn: (j.device, j.size or 0) for lfn, j in self.jobs.items()}
        # best last-known score first: the order spare copies keep their room in
        entries = sorted(self.index.entries(), key=lambda e: -e.score)
        held = {e.lfn: (e.device, e.size) for e in entries}
        work = plan(wanted, held, in_flight, self.rooms(), keep_spare=not assignment.draining)
        scores = {w.lfn: w.score for w in wanted}
        for entry in entries:
            entry.score = scores.get(entry.lfn, entry.score)  # a spare copy keeps its last score
        for lfn in work.cancel + self._yielding(wanted):
            self._cancel(lfn)
        for lfn in work.evict:
            if lfn in scores and assignment.draining:
                continue  # nothing new comes in while draining: no need to make room
            self.evict(lfn, "outranked" if lfn in scores else "unassigned")
        started = deferred = unconfirmed = 0
        confirmed, self._last_assigned = self._last_assigned, {w.lfn for w in wanted}
        if not assignment.draining:
            for w, dev in work.stage:
                if w.defer:
                    deferred += 1
                elif w.lfn not in confirmed:
                    unconfirmed += 1
                else:
                    started += self._submit(w, dev)
        self.releases.release(assignment.coordinator, work.release, "no room")
        self.releases.release(assignment.coordinator, self.failures.exhausted(), "copies failed")
        return {"wanted": len(wanted), "stage": started, "deferred": deferred, "unconfirmed": unconfirmed,
                "spare": len(work.spare), "evict": len(work.evict), "release": len(work.release)}

    def _yielding(self, wanted: list[Wanted]) -> list[str]:
        """Copies in flight of files now deferred, if less than half done: they give the storage link back to
        the jobs reading those files (a copy that far along finishes instead)."""
        deferred = {w.lfn for w in wanted if w.defer}
        with self._lock:
            return [lfn for lfn, j in self.jobs.items()
                    if lfn in deferred and j.done_bytes * 2 < (j.size or 0)]

    def storage_reads(self) -> list[str]:
        """Files jobs on this worker have open through the view (or storage) and this node holds no copy of.

        The scan also counts the files open from the cache, so ``/metrics`` shows what jobs read from where
        (the union view itself counts nothing)."""
        if self.view is None or not self.config["report_reads"]:
            return []
        reading = open_lfns(self.view.lfn_of, skip_pids=frozenset({os.getpid()}))
        from_storage = sorted(lfn for lfn in reading if lfn not in self.index)
        self.open_files = {"cache": len(reading) - len(from_storage), "storage": len(from_storage)}
        self.reading = from_storage
        return from_storage[:MAX_REPORTED_READS]

    def _wanted(self, files: list[AssignedFile]) -> list[Wanted]:
        out = []
        listed: set[str] = set()
        for f in files:
            try:
                lfn = normalize_lfn(f.lfn)
            except ValueError:
                log.warning("ignoring an assigned file with a bad LFN: %r", f.lfn)
                continue
            listed.add(lfn)
            if self.releases.is_held_back(lfn):
                continue
            held = self.index.get(lfn)
            if not held and self.failures.waiting(lfn):
                continue
            if held and f.size is not None and f.size != held.size:
                # the coordinator saw another size: has the source changed?
                self.revalidator.check(held, checksum=False)
                held = self.index.get(lfn)
            size = held.size if held else self._size_of(lfn, f)
            if size is not None:
                out.append(Wanted(lfn, f.score, size, f.source, defer=f.defer, peers=_peers_of(f),
                                  peers_only=f.peers_only is True))
        assigned = {w.lfn for w in out}
        self._sizes = {k: v for k, v in self._sizes.items() if k in assigned}
        self.failures.keep_only(listed)
        return out

    def _size_of(self, lfn: str, f: AssignedFile) -> int | None:
        if f.size is not None and f.size >= 0:
            return f.size
        if lfn in self._sizes:
            return self._sizes[lfn]
        try:
            self._sizes[lfn] = self.storage_for(f.source).stat(lfn).size
        except FileNotFoundError as exc:
            self._fail(lfn, exc.strerror or str(exc), permanent=True)
            return None
        except StorageError as exc:
            self._fail(lfn, str(exc), permanent=not exc.transient)
            return None
        except (ValueError, OSError) as exc:
            self._fail(lfn, f"{lfn}: cannot read its size in storage: {exc}", permanent=False)
            return None
        return self._sizes[lfn]

    def capacities(self) -> dict[str, int]:
        """Each device's capacity in HTDA's one meaning of it (see :func:`~.allocation.holdable`)."""
        rooms = self.rooms()
        return {r.device.path: limit for r, limit in zip(rooms, holdable(rooms))}

    def rooms(self) -> list[Room]:
        with self._lock:
            flight = [(j.device, j.size or 0) for j in self.jobs.values()]
        out = []
        for dev in self.device.devices():
            used = self.index.used_bytes(dev) + sum(s for d, s in flight if d is dev)
            mark = self.marks[id(dev)]
            reserve = int((1 - mark.high) * dev.filesystem_bytes())
            out.append(Room(dev, dev.capacity_bytes(), used, dev.free_bytes(), mark.high, mark.low, reserve,
                            dev.filesystem_id()))
        return out

    # -- staging ---------------------------------------------------------------------
    def _submit(self, w: Wanted, dev: CacheDevice) -> int:
        try:
            storage = self.storage_for(w.source)
        except ValueError as exc:
            self._fail(w.lfn, str(exc), permanent=True)
            return 0
        peers = self.peer_sources(w.peers) if w.peers else []
        if w.peers_only and not peers:
            named = ", ".join(w.peers) or "none named"
            self._fail(w.lfn, f"{w.lfn}: no peer to copy it from is in the pool ({named}); storage may not be read "
                              f"for it", permanent=False, waiting=True)
            return 0
        with self._lock:
            if w.lfn in self.jobs:
                return 0
            job = StagingJob(w.lfn, storage, dev, w.score, w.size, source_url=w.source, peers=peers,
                             storage_fallback=not w.peers_only, queued_at=self.clock.time())
            self.jobs[w.lfn] = job
        self._pool.submit(self._stage, job)
        return 1

    def _stage(self, job: StagingJob) -> None:
        try:
            if job.cancel.is_set():
                raise StagingCancelled(f"{job.lfn}: cancelled before it started")
            meta = self.stager.stage(job)
            entry = Entry.from_meta(job.device, meta, checked_at=self.clock.time())
            entry.score = job.score
            entry.visible_since = self.clock.monotonic()  # renamed into place by the stager: mergerfs serves it now
            self.index.add(entry)
            self.viewer.added(job.lfn)
            self.failures.clear(job.lfn)
            self.m_staged.inc()
            self.m_staged_bytes.inc(entry.size)
            if job.peer_bytes:
                self.m_peer_copied.inc(job.peer_bytes)
            self.reporter.added(entry.lfn, entry.size)
            log.info("staged %s (%d bytes) on %s from %s", job.lfn, entry.size, job.device.path, _sources(job))
        except StagingCancelled as exc:
            job.state = "cancelled"
            log.info("%s", exc)
        except PeersUnavailable as exc:
            job.state, job.error = "failed", str(exc)
            self._fail(job.lfn, str(exc), permanent=False, waiting=True)
        except StagingError as exc:
            job.state, job.error = "failed", str(exc)
            self._fail(job.lfn, str(exc), exc.permanent)
        except Exception as exc:  # noqa: BLE001 - a bug in one copy must not kill the worker
            job.state, job.error = "failed", f"internal error: {exc}"
            log.exception("staging %s failed unexpectedly", job.lfn)
            self._fail(job.lfn, job.error, permanent=False)
        finally:
            with self._lock:
                self.jobs.pop(job.lfn, None)

    def _fail(self, lfn: str, error: str, permanent: bool, waiting: bool = False) -> None:
        """Record a failed copy (see :mod:`.failures`)."""
        self.failures.record(lfn, error, permanent, waiting)

    def _cancel(self, lfn: str) -> None:
        with self._lock:
            job = self.jobs.get(lfn)
        if job:
            job.cancel.set()

    def exhausted(self) -> list[str]:
        """Files whose copies keep failing: released so another node (or storage) serves them."""
        return self.failures.exhausted()

    # -- eviction --------------------------------------------------------------------
    def evict(self, lfn: str, reason: str) -> bool:
        """Remove a copy: out of the view first, then the index, then the disk."""
        entry = self.index.get(lfn)
        if entry is None:
            return False
        self.viewer.removing(lfn)
        self.index.remove(lfn)
        entry.device.delete(lfn)
        self.reporter.removed(lfn)
        self._record_eviction(lfn, entry.size, entry.device, reason)
        return True

    def evict_on_request(self, lfns: list[str], coordinator: str | None) -> list[str]:
        """An admin's eviction: drop the copies now, give the files back to the coordinator, and keep
        them out of this node for ``release_interval`` (until the coordinator has placed them elsewhere).
        Not while :meth:`apply` runs: the component calls it under its cycle lock."""
        self.releases.hold_back(lfns)
        evicted = []
        for lfn in lfns:
            self._cancel(lfn)
            if self.evict(lfn, "admin request"):
                evicted.append(lfn)
        self.releases.release(coordinator or "", evicted, "evicted by an admin")
        return evicted

    def _record_eviction(self, lfn: str, size: int, device: CacheDevice, reason: str) -> None:
        self.evictions.append({"lfn": lfn, "size": size, "device": device.path, "reason": reason,
                               "time": self.clock.time()})
        self.m_evicted.inc(reason=reason.split(":")[0])
        self.m_evicted_bytes.inc(size)
        log.info("evicted %s (%s)", lfn, reason)

    # -- revalidation ------------------------------------------------------------------
    def revalidate_some(self) -> int:
        """Re-check the copies checked longest ago (see :mod:`.revalidation`); return how many were dropped."""
        return self.revalidator.some()

    # -- shutdown --------------------------------------------------------------------
    def shutdown(self) -> None:
        with self._lock:
            for job in self.jobs.values():
                job.cancel.set()
        self._pool.shutdown(wait=True, cancel_futures=True)
        self.viewer.stop()

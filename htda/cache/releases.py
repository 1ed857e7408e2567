"""Releases: files this node gives back to the coordinator, and files an admin evicted.

A file is released when no device has room for it, when its copies keep failing, or when an admin evicts
it; the same file is released at most once per ``release_interval`` seconds (the coordinator needs a
cycle to place it elsewhere, and would be told again and again otherwise).  A file an admin evicted is
also *held back* that long: assignments naming it are ignored meanwhile.

Threads: the ``htda-cache-cycle`` thread, and REST workers answering ``POST /cache/evict``, both under the
component's cycle lock, so one at a time.
"""

from __future__ import annotations

import logging
from typing import Any

from ..node.client import ClientError
from ..node.clock import SYSTEM_CLOCK, Clock
from ..protocol.clients import CoordinatorClient
from .reporting import HoldingsReporter

__all__ = ["Releases"]

log = logging.getLogger("htda.cache")


class Releases:
    """Sends releases to a coordinator (through the reporter's client, as the reporter's node)."""

    def __init__(self, reporter: HoldingsReporter, interval: float, counter: Any = None,
                 clock: Clock = SYSTEM_CLOCK):
        self.reporter, self.interval, self.clock = reporter, interval, clock
        self._counter = counter  # htda_cache_released_files_total
        #: lfn -> wall-clock time it was last released
        self.released: dict[str, float] = {}
        #: lfn -> until when an admin's eviction keeps it off this node
        self.held_back: dict[str, float] = {}

    def release(self, coordinator: str, lfns: list[str], reason: str) -> None:
        """Release the files of ``lfns`` not released within ``release_interval``; a failure is logged (they
        are released again at the next cycle)."""
        now = self.clock.time()
        due = [lfn for lfn in dict.fromkeys(lfns) if now - self.released.get(lfn, 0.0) >= self.interval]
        if not due or not coordinator:
            return
        try:
            CoordinatorClient(self.reporter.client, coordinator).releases(self.reporter.node_name, due, reason,
                                                                          idempotent=True)
        except ClientError as exc:
            log.warning("releasing %d files to %s failed: %s", len(due), coordinator, exc)
            return
        for lfn in due:
            self.released[lfn] = now
        if self._counter is not None:
            self._counter.inc(len(due))
        log.info("released %d files to %s (%s)", len(due), coordinator, reason)

    def hold_back(self, lfns: list[str]) -> None:
        """Keep ``lfns`` off this node for ``release_interval`` (an admin evicted them)."""
        now = self.clock.time()
        until = now + self.interval
        self.held_back = {k: v for k, v in self.held_back.items() if v > now}
        for lfn in lfns:
            self.held_back[lfn] = until

    def is_held_back(self, lfn: str) -> bool:
        return self.held_back.get(lfn, 0.0) > self.clock.time()

"""Telling the pool what this node holds: holdings to the locators, releases to the coordinator.

Holdings go as deltas when copies appear or go, and as the complete list
(``replace: true``) at start, every ``interval`` seconds, when a locator
joins, and after any failed delta, so a restarted locator converges.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from ..node.client import Client, ClientError
from ..node.clock import SYSTEM_CLOCK, Clock
from ..node.periodic import Periodic
from ..protocol.clients import LocatorClient
from ..protocol.locator import Holding, HoldingsRequest

__all__ = ["HoldingsReporter"]

log = logging.getLogger("htda.cache.reporting")

class HoldingsReporter:
    """A thread that sends holdings to ``targets()`` (locator base URLs)."""

    def __init__(self, node_name: str, client: Client, targets: Callable[[], list[str]],
                 snapshot: Callable[[], list[Holding]], interval: float = 60.0, clock: Clock = SYSTEM_CLOCK):
        self.node_name, self.client, self.targets, self.snapshot = node_name, client, targets, snapshot
        self.interval, self.clock = interval, clock
        self._added: dict[str, int] = {}
        self._removed: set[str] = set()
        self._full_due = True
        self._last_full = 0.0
        # guards the pending delta (_added, _removed): staging threads add, evictions remove, the
        # htda-cache-holdings thread takes it
        self._lock = threading.Lock()
        #: the sending thread (its health is the node's: see Component.loops)
        self.loop = Periodic("htda-cache-holdings", min(interval, 5.0), self.flush, log, first_delay=min(interval, 5.0),
                             clock=clock)
        self.sent = 0
        self.failures = 0

    def added(self, lfn: str, size: int) -> None:
        with self._lock:
            self._removed.discard(lfn)
            self._added[lfn] = size
        self.loop.wake()

    def removed(self, lfn: str) -> None:
        with self._lock:
            self._added.pop(lfn, None)
            self._removed.add(lfn)
        self.loop.wake()

    def request_full(self) -> None:
        self._full_due = True
        self.loop.wake()

    def start(self) -> None:
        self.loop.start()

    def stop(self) -> None:
        self.loop.stop(timeout=5)

    def flush(self) -> None:
        """Send what is due now: the full list, or the pending delta."""
        targets = self.targets()
        if not targets:
            return
        full = self._full_due or self.clock.monotonic() - self._last_full >= self.interval
        with self._lock:
            added, removed = self._added, self._removed
            self._added, self._removed = {}, set()
        if full:
            self._full_due = False
            payload = HoldingsRequest(node=self.node_name, files=self.snapshot(), replace=True)
        elif added or removed:
            payload = HoldingsRequest(node=self.node_name, files=[Holding(lfn=k, size=v) for k, v in added.items()],
                                      replace=False, removed=sorted(removed))
        else:
            return
        ok = self._send(targets, payload)
        if full and ok:
            self._last_full = self.clock.monotonic()
        if not ok:
            self._full_due = True  # a lost delta is repaired by the next complete list

    def _send(self, targets: list[str], payload: HoldingsRequest) -> bool:
        ok = True
        for url in targets:
            try:
                LocatorClient(self.client, url).holdings(payload, idempotent=True)
                self.sent += 1
            except ClientError as exc:
                ok = False
                self.failures += 1
                log.warning("holdings report to %s failed: %s", url, exc)
        return ok

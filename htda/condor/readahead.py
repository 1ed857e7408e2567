"""The submit agent's side of read-ahead: ask a job's first-read home to read its inputs before the job starts.

A job whose inputs no node holds is steered to its first-read home
(:mod:`htda.condor.homes`) when it is routed and starts there seconds later.
The agent tells the home's cache node the job's inputs at once
(``POST /api/v1/cache/read-ahead``, :mod:`htda.cache.readahead`), so that
the worker's read-through cache fetches them over the storage link in that
time instead of after the job has started.  Best effort: an ask that fails is
dropped (the job reads its inputs itself), and a node that refuses (its
``read_ahead`` is off: it reads storage directly) is not asked again for
``refused_for`` seconds.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable

from ..node.client import Client, ClientError, HTTPStatusError
from ..node.clock import SYSTEM_CLOCK, Clock
from ..protocol import cache

__all__ = ["ReadAheadAsker"]

#: most jobs kept per home between two sends (one request), and most inputs of a job asked for
MAX_JOBS = 1000


class ReadAheadAsker:
    """Inputs to read ahead, per home node, sent by :meth:`send`; ``_lock`` guards ``_pending`` and ``_refused``
    (hook workers add, the agent's sender thread sends)."""

    def __init__(self, client: Client, url_of: Callable[[str], str | None], log: logging.Logger, metrics,
                 refused_for: float = 600.0, clock: Clock = SYSTEM_CLOCK):
        self.client, self.url_of, self.log, self.clock = client, url_of, log, clock
        self.refused_for = refused_for
        self._lock = threading.Lock()
        self._pending: dict[str, dict[tuple[str, ...], None]] = {}  # node -> jobs' inputs in the order asked
        self._refused: dict[str, float] = {}  # node -> monotonic time until which it is not asked
        self.m_asked = metrics.counter("htda_submit_read_ahead_total", "inputs a first-read home was asked to "
                                       "read ahead, by outcome (asked, refused: its read_ahead is off, failed)",
                                       ("outcome",))

    def want(self, node: str, lfns: Iterable[str]) -> bool:
        """Queue one job's inputs ``lfns`` (in its order) for ``node``; whether anything is to send (False while
        the node refuses)."""
        with self._lock:
            if self._refused.get(node, 0.0) > self.clock.monotonic():
                return False
            pending = self._pending.setdefault(node, {})
            if len(pending) < MAX_JOBS:
                pending[tuple(lfns)[:MAX_JOBS]] = None  # a job's inputs beyond the contract's limit: not read ahead
            return bool(pending)

    def send(self) -> None:
        """Ask each node for what is pending for it (one request per node)."""
        with self._lock:
            pending, self._pending = self._pending, {}
        for node, jobs in pending.items():
            self._ask(node, [list(inputs) for inputs in jobs])

    def _ask(self, node: str, jobs: list[list[str]]) -> None:
        files = sum(map(len, jobs))
        url = self.url_of(node)
        if url is None:
            self.m_asked.inc(files, outcome="failed")
            return
        try:
            self.client.post(cache.READ_AHEAD.url(url), {"jobs": jobs}, timeout=2.0, idempotent=True, retries=0)
        except HTTPStatusError as exc:
            if exc.status != 409:
                self._failed(node, files, exc)
                return
            with self._lock:
                self._refused[node] = self.clock.monotonic() + self.refused_for
            self.log.info("cache node %s does not read ahead (its read_ahead is off); not asked for %.0f s",
                          node, self.refused_for)
            self.m_asked.inc(files, outcome="refused")
        except ClientError as exc:
            self._failed(node, files, exc)
        else:
            self.m_asked.inc(files, outcome="asked")

    def _failed(self, node: str, files: int, exc: Exception) -> None:
        self.m_asked.inc(files, outcome="failed")
        self.log.debug("read-ahead of %d inputs at %s failed: %s", files, node, exc)

"""Failed copies: when a file may be tried again, and when the cache gives up on it.

A transient failure is retried after ``retry_delay`` seconds, doubling with each attempt (at most 64x); a
file whose copies failed ``max_attempts`` times, or failed permanently (the source does not exist, the
device is full), is *exhausted*: the cycle releases it to the coordinator so another node (or storage)
serves it.  A copy that waits for a peer (``peers_only`` and no peer could give it) is retried after
``retry_delay`` without counting as an attempt: the peer may not hold the file yet.

Threads: staging threads record failures and clear them when a copy lands, the ``htda-cache-cycle`` thread
records failures of its own (a size it could not read), reads which files wait, and forgets files no longer
assigned; REST workers list them.  All under :attr:`Failures._lock`.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from dataclasses import dataclass
from typing import Any

from ..node.clock import SYSTEM_CLOCK, Clock

__all__ = ["Failure", "Failures"]

log = logging.getLogger("htda.cache")

#: the back-off doubles at most this many times (a permanent failure waits that long)
MAX_DOUBLINGS = 6


@dataclass(frozen=True)
class Failure:
    """The last failure of one file's copy: attempts so far, when it may be tried again, why it failed."""

    count: int
    retry_at: float  # wall-clock time
    error: str
    permanent: bool = False


class Failures:
    """The failures of files still assigned (see the module doc)."""

    def __init__(self, retry_delay: float, max_attempts: int, counter: Any = None, clock: Clock = SYSTEM_CLOCK):
        self.retry_delay, self.max_attempts, self.clock = retry_delay, max_attempts, clock
        self._counter = counter  # htda_cache_staging_failures_total, by kind (transient, permanent)
        self._failures: dict[str, Failure] = {}
        #: the latest failed attempts, oldest first (what ``/api/v1/cache/staging`` shows)
        self.recent: deque[dict[str, Any]] = deque(maxlen=100)
        # guards _failures and recent: staging threads and the cycle write, REST workers copy
        self._lock = threading.Lock()

    def record(self, lfn: str, error: str, permanent: bool, waiting: bool = False) -> Failure:
        """Record a failed copy of ``lfn``; ``waiting``: it waits for a peer and does not count as an attempt."""
        with self._lock:
            prev = self._failures.get(lfn)
            count = (prev.count if prev else 0) + (0 if waiting else 1)
            doublings = MAX_DOUBLINGS if permanent else min(max(count - 1, 0), MAX_DOUBLINGS)
            now = self.clock.time()
            failure = self._failures[lfn] = Failure(count, now + self.retry_delay * 2 ** doublings, error, permanent)
            self.recent.append({"lfn": lfn, "attempt": count, "error": error, "permanent": permanent, "time": now})
        if self._counter is not None:
            self._counter.inc(kind="permanent" if permanent or count >= self.max_attempts else "transient")
        if waiting:
            log.info("copy of %s waits for a peer to copy it from: %s", lfn, error)
        elif permanent:
            log.warning("staging %s failed, not retrying: %s", lfn, error)
        else:
            log.warning("staging %s failed (attempt %d of %d): %s", lfn, count, self.max_attempts, error)
        return failure

    def get(self, lfn: str) -> Failure | None:
        with self._lock:
            return self._failures.get(lfn)

    def waiting(self, lfn: str) -> bool:
        """Whether a copy of ``lfn`` failed and may not be tried again yet."""
        failure = self.get(lfn)
        return failure is not None and failure.retry_at > self.clock.time()

    def clear(self, lfn: str) -> None:
        """A copy of ``lfn`` landed: its failures are history."""
        with self._lock:
            self._failures.pop(lfn, None)

    def keep_only(self, assigned: set[str]) -> None:
        """Forget the failures of files no longer assigned: nothing left to release."""
        with self._lock:
            self._failures = {k: v for k, v in self._failures.items() if k in assigned}

    def exhausted(self) -> list[str]:
        """Files whose copies failed permanently or ``max_attempts`` times: to be released."""
        with self._lock:
            return [lfn for lfn, f in self._failures.items() if f.permanent or f.count >= self.max_attempts]

    def items(self) -> list[tuple[str, Failure]]:
        """A copy of the failures, by file."""
        with self._lock:
            return list(self._failures.items())

    def __len__(self) -> int:
        with self._lock:
            return len(self._failures)

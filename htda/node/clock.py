"""The clock components read, passed in so that tests can drive time instead of waiting for it.

Two readings, as the standard library has them: :meth:`Clock.time` is wall-clock time (seconds since the
epoch: what is shown, recorded in meta and compared across nodes), :meth:`Clock.monotonic` is for
intervals and deadlines on this node.  Production code takes a ``clock`` argument defaulting to
:data:`SYSTEM_CLOCK`; the tests' ``FakeClock`` (``testkit/clock.py``) moves only when told to.
"""

from __future__ import annotations

import time
from typing import Protocol

__all__ = ["Clock", "SystemClock", "SYSTEM_CLOCK"]


class Clock(Protocol):
    """What a component needs of a clock."""

    def time(self) -> float:
        """Seconds since the epoch (``time.time()``)."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (``time.monotonic()``)."""
        ...


class SystemClock:
    """The real clock: :func:`time.time` and :func:`time.monotonic`."""

    def time(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()


#: the one real clock every component defaults to
SYSTEM_CLOCK: Clock = SystemClock()

"""A clock for tests: it stands still until the test moves it (see :mod:`htda.node.clock`)."""

from __future__ import annotations

import threading

__all__ = ["FakeClock"]


class FakeClock:
    """A :class:`htda.node.clock.Clock` whose time only :meth:`advance` moves.

    Both readings move together; ``time()`` starts at ``start`` (an arbitrary date), ``monotonic()`` at 1000.
    Thread-safe: staging threads read it while the test advances it.
    """

    def __init__(self, start: float = 1_700_000_000.0, monotonic_start: float = 1000.0):
        self._wall, self._mono = start, monotonic_start
        self._lock = threading.Lock()

    def time(self) -> float:
        with self._lock:
            return self._wall

    def monotonic(self) -> float:
        with self._lock:
            return self._mono

    def advance(self, seconds: float) -> None:
        """Move both readings ``seconds`` forward."""
        if seconds < 0:
            raise ValueError("a clock does not go back")
        with self._lock:
            self._wall += seconds
            self._mono += seconds

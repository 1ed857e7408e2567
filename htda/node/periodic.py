"""A background thread that runs one piece of work every so often, or at once when woken, and says whether
it is keeping up (``/healthz`` asks every loop of the node)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .clock import SYSTEM_CLOCK, Clock

__all__ = ["LoopHealth", "Periodic", "FAILING_AFTER"]

#: passes in a row that must fail before a loop counts as failing (one bad pass is not a sick node)
FAILING_AFTER = 3


@dataclass(frozen=True)
class LoopHealth:
    """One loop's state as ``/healthz`` reports it: ``state`` is ok, failing, stale or stopped."""

    name: str
    state: str
    detail: str = ""
    last_ok_ago: float | None = None

    @property
    def ok(self) -> bool:
        return self.state == "ok"

    def to_json(self) -> dict[str, Any]:
        return {"state": self.state, "detail": self.detail, "last_ok_ago": self.last_ok_ago}


class Periodic:
    """Runs ``work()`` every ``interval`` seconds and whenever :meth:`wake` is called.

    The first run comes after ``first_delay`` seconds (at once by default).  An
    exception in ``work`` is logged and the loop goes on: one bad pass must not
    end a background duty of the node; :meth:`health` tells when passes keep
    failing or none has completed for ``stale_after`` seconds (by default three
    intervals, and at least a minute: a slow pass is not a hung one).

    State written by the loop's own thread (``_last_ok``, ``_failures``,
    ``_error``) is read by :meth:`health` without a lock: each is one reference
    swap, and a reading one pass old is good enough for a probe.
    """

    def __init__(self, name: str, interval: float, work: Callable[[], object], log: logging.Logger,
                 first_delay: float = 0.0, stale_after: float | None = None,
                 clock: Clock = SYSTEM_CLOCK):
        self.name, self.interval, self.work, self.log, self.first_delay = name, interval, work, log, first_delay
        self.stale_after = stale_after if stale_after is not None else max(3 * interval, 60.0) + first_delay
        self.clock = clock
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started_at: float | None = None
        self._last_ok: float | None = None
        self._failures = 0
        self._error = ""

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def start(self) -> None:
        self._started_at = self.clock.monotonic()
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread:
            self._thread.join(timeout=timeout)

    def run_once(self) -> bool:
        """One pass, recorded for :meth:`health`; False if it raised (logged)."""
        try:
            self.work()
        except Exception as exc:  # noqa: BLE001 - logged; the next pass may do better
            self._failures += 1
            self._error = f"{type(exc).__name__}: {exc}"
            self.log.exception("%s failed", self.name)
            return False
        self._last_ok, self._failures, self._error = self.clock.monotonic(), 0, ""
        return True

    def health(self) -> LoopHealth:
        """Whether the loop keeps up: stopped (its thread ended), failing (the last ``FAILING_AFTER`` passes
        raised), stale (no pass completed for ``stale_after`` seconds: hung, or every pass too slow) or ok."""
        now = self.clock.monotonic()
        ago = None if self._last_ok is None else round(now - self._last_ok, 1)
        if self._started_at is None or self._thread is None or not self._thread.is_alive():
            return LoopHealth(self.name, "stopped", "not running", ago)
        if self._failures >= FAILING_AFTER:
            return LoopHealth(self.name, "failing", f"the last {self._failures} passes failed: {self._error}", ago)
        since = now - (self._last_ok if self._last_ok is not None else self._started_at)
        if since > self.stale_after:
            return LoopHealth(self.name, "stale", f"no pass completed for {since:.0f} s (one every "
                                                  f"{self.interval:g} s expected)", ago)
        return LoopHealth(self.name, "ok", "", ago)

    def _run(self) -> None:
        if self.first_delay > 0 and self._stop.wait(self.first_delay):
            return
        while not self._stop.is_set():
            self.run_once()
            self._pause()

    def _pause(self) -> None:
        self._wake.wait(timeout=self.interval)
        self._wake.clear()

"""A background thread that runs one piece of work every so often, or at once when woken."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

__all__ = ["Periodic"]


class Periodic:
    """Runs ``work()`` every ``interval`` seconds and whenever :meth:`wake` is called.

    The first run comes after ``first_delay`` seconds (at once by default).  An
    exception in ``work`` is logged and the loop goes on: one bad pass must not
    end a background duty of the node.
    """

    def __init__(self, name: str, interval: float, work: Callable[[], object], log: logging.Logger,
                 first_delay: float = 0.0):
        self.name, self.interval, self.work, self.log, self.first_delay = name, interval, work, log, first_delay
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread:
            self._thread.join(timeout=timeout)

    def _run(self) -> None:
        if self.first_delay > 0 and self._stop.wait(self.first_delay):
            return
        while not self._stop.is_set():
            try:
                self.work()
            except Exception:  # noqa: BLE001 - logged; the next pass may do better
                self.log.exception("%s failed", self.name)
            self._pause()

    def _pause(self) -> None:
        self._wake.wait(timeout=self.interval)
        self._wake.clear()

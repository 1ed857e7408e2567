"""Progress within a pass: a line every few seconds while its jobs run, so a long pass is not silent."""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["PassProgress", "progress_line"]

EVERY = 10.0  # seconds between lines


def progress_line(label: str, done: int, total: int, elapsed: float, running: int | None = None) -> str:
    """``pass 1: 5/12 jobs done, 3 running, 40 s`` (``running`` left out when not known)."""
    busy = f", {running} running" if running is not None else ""
    return f"{label}: {done}/{total} jobs done{busy}, {elapsed:.0f} s"


class PassProgress:
    """Logs :func:`progress_line` at most every ``every`` seconds while a pass runs; quiet once all are done.

    ``update`` is cheap: call it whenever the caller looks at its jobs (each poll, each finished job).
    """

    def __init__(self, label: str, total: int, log: Callable[[str], None] = print, every: float = EVERY,
                 clock: Callable[[], float] = time.monotonic):
        self.label, self.total, self.log, self.every, self.clock = label, total, log, every, clock
        self.started = self.last = clock()

    def update(self, done: int, running: int | None = None) -> None:
        now = self.clock()
        if done < self.total and now - self.last >= self.every:
            self.last = now
            self.log(progress_line(self.label, done, self.total, now - self.started, running))

"""The union-view driver interface and the mount helpers the drivers share."""

from __future__ import annotations

import logging
import os
import subprocess
from abc import ABC, abstractmethod
from typing import Any, ClassVar

from ...node.clock import SYSTEM_CLOCK, Clock

__all__ = ["UnionDriver", "UnionError", "mount_type", "unmount", "run"]

log = logging.getLogger("htda.cache.union")


class UnionError(Exception):
    """The view could not be set up or changed."""


class UnionDriver(ABC):
    """Presents ``branches`` (cache directories, in order) over ``storage`` at ``view``.

    Contract with the cache: :meth:`added` after a copy was renamed into
    place, :meth:`removing` *before* a copy is deleted (so the view stops
    pointing at it), :meth:`refresh` once per cycle when holdings changed.
    :meth:`stop` leaves the view serving, so jobs keep reading when the daemon
    is down; :meth:`teardown` removes it.
    """

    name: ClassVar[str] = ""

    def __init__(self, view: str, branches: list[str], storage: str | None, state_dir: str,
                 options: dict[str, Any] | None = None, clock: Clock = SYSTEM_CLOCK):
        self.clock = clock  # paces rescans and remounts
        self.view = os.path.abspath(view)
        self.branches = [os.path.abspath(b) for b in branches]
        self.storage = os.path.abspath(storage) if storage else None
        self.state_dir = state_dir
        self.options = dict(options or {})

    @abstractmethod
    def start(self, held: list[str]) -> None:
        """Make the view serve (mount it, or adopt a mount left by an earlier run)."""

    def added(self, lfn: str) -> None:
        """A copy of ``lfn`` appeared on a branch."""

    def removing(self, lfn: str) -> None:
        """The copy of ``lfn`` is about to be deleted."""

    def refresh(self) -> None:
        """Holdings changed during this cycle (drivers that must remount do it here)."""

    def stop(self) -> None:
        """The daemon stops: leave the view serving."""

    @abstractmethod
    def teardown(self) -> None:
        """Remove the view (unmount); for operators and tests."""

    def read_roots(self) -> list[str]:
        """Directories a job's open file can resolve under when it reads through the view (``/proc/<pid>/fd``
        shows the view's path for FUSE views, the storage path for links)."""
        return [self.view, *([self.storage] if self.storage else [])]

    def lfn_of(self, path: str) -> str | None:
        """The LFN an open file's resolved ``path`` names in the view or in storage, or None."""
        for root in self.read_roots():
            if path.startswith(root.rstrip("/") + "/"):
                return path[len(root.rstrip("/")):]
        return None

    def describe(self) -> dict[str, Any]:
        return {"driver": self.name, "view": self.view, "branches": self.branches, "storage": self.storage}


def mount_type(path: str) -> str | None:
    """The file-system type mounted exactly at ``path``, or None."""
    target = os.path.realpath(path)
    found = None
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            fields = line.split()
            sep = fields.index("-")
            mount_point = fields[4].encode().decode("unicode_escape")
            if mount_point == target:
                found = fields[sep + 1]  # the last mount on top wins
    return found


def run(cmd: list[str], timeout: float = 30.0) -> None:
    """Run a mount tool; raise :class:`UnionError` with its message when it fails."""
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UnionError(f"{cmd[0]}: {exc}") from None
    if done.returncode != 0:
        raise UnionError(f"{' '.join(cmd)}: {(done.stderr or done.stdout).strip() or done.returncode}")


def unmount(path: str, lazy: bool = False) -> None:
    """Unmount ``path`` (lazily: open files keep working, new lookups stop)."""
    kind = mount_type(path)
    if kind is None:
        return
    if kind.startswith("fuse"):
        cmd = ["fusermount3", "-u"] + (["-z"] if lazy else []) + [path]
    else:
        cmd = ["umount"] + (["-l"] if lazy else []) + [path]
    run(cmd)
    log.info("unmounted %s (%s)", path, kind)

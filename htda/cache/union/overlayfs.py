"""overlayfs (kernel): the fastest view, remounted when holdings change.

The lower layers are the cache branches first and storage last; there is no
upper layer, so the view is read-only and jobs write to storage by its own
path (documented in docs/cache.rst).  overlayfs does not promise to notice
files added to or removed from its lower layers while mounted, so a change
of holdings builds a *new* mount under ``<state_dir>/overlay/<generation>``
and swaps the ``view`` symlink to it atomically (rename of a new link over
the old one).  A job that already opened a file keeps reading it from the
old mount; old mounts are detached lazily after ``grace`` seconds, which
keeps open files working until they are closed.  Lower layers must be
ordinary directories: overlayfs refuses FUSE (mergerfs) lower layers.
"""

from __future__ import annotations

import os
import time

from .. import readers
from .base import UnionDriver, UnionError, mount_type, run, unmount

__all__ = ["OverlayfsDriver"]


class OverlayfsDriver(UnionDriver):
    """Options: ``grace`` (seconds before an old mount is detached, default 60),
    ``min_interval`` (seconds between remounts, default 2)."""

    name = "overlayfs"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.mounts_dir = os.path.join(self.state_dir, "overlay")
        self.grace = float(self.options.get("grace", 60.0))
        self.min_interval = float(self.options.get("min_interval", 2.0))
        self._dirty = False
        self._last = 0.0
        self._retired: list[tuple[float, str]] = []

    def lowerdir(self) -> str:
        layers = [*self.branches, *([self.storage] if self.storage else [])]
        for path in layers:
            if any(c in path for c in ",:\\"):
                raise UnionError(f"overlayfs cannot use a layer path containing ',', ':' or '\\': {path}")
        if len(layers) < 2:
            layers.append(self._empty_layer())  # overlayfs needs two lower layers without an upper one
        return ":".join(layers)

    def _empty_layer(self) -> str:
        path = os.path.join(self.state_dir, "overlay-empty")
        os.makedirs(path, exist_ok=True)
        return path

    def start(self, held: list[str]) -> None:
        os.makedirs(self.mounts_dir, exist_ok=True)
        if os.path.isdir(self.view) and not os.path.islink(self.view):
            if os.listdir(self.view):
                raise UnionError(f"view {self.view} is a non-empty directory; overlayfs needs it as a symlink")
            os.rmdir(self.view)
        previous = self._current()
        self._mount_new()
        if previous:
            self._retired.append((self.clock.monotonic(), previous))
        self._detach_stale(adopt=True)

    def added(self, lfn: str) -> None:
        self._dirty = True

    def removing(self, lfn: str) -> None:
        self._dirty = True

    def refresh(self) -> None:
        now = self.clock.monotonic()
        if self._dirty and now - self._last >= self.min_interval:
            previous = self._current()
            self._mount_new()
            if previous:
                self._retired.append((now, previous))
        self._detach_stale()

    def read_roots(self) -> list[str]:
        # a job's file resolves beneath the generation it was opened in, which may be retired already; once
        # detached (after the grace) it shows a path relative to that mount and is not recognised any more
        try:
            mounts = sorted(os.path.join(self.mounts_dir, n) for n in os.listdir(self.mounts_dir))
        except OSError:
            mounts = []
        return [*mounts, *super().read_roots()]

    def _current(self) -> str | None:
        try:
            return os.path.realpath(self.view) if os.path.islink(self.view) else None
        except OSError:
            return None

    def _mount_new(self) -> None:
        self._dirty = False
        self._last = self.clock.monotonic()
        target = os.path.join(self.mounts_dir, f"{time.time_ns()}")
        os.makedirs(target)
        run(["mount", "-t", "overlay", "htda-view", "-o", f"ro,lowerdir={self.lowerdir()}", target])
        link = f"{self.view}.tmp-{os.getpid()}"
        if os.path.lexists(link):
            os.unlink(link)
        os.symlink(target, link)
        readers.rewatch(self)  # mark the new generation before jobs can open files in it
        os.replace(link, self.view)  # atomic: a job sees the old or the new mount, never nothing

    def _detach_stale(self, adopt: bool = False) -> None:
        """Detach retired mounts after their grace; on start, also those a killed daemon left."""
        now = self.clock.monotonic()
        keep = []
        for since, path in self._retired:
            if now - since >= self.grace:
                self._detach(path)
            else:
                keep.append((since, path))
        self._retired = keep
        if adopt:
            current = self._current()
            retired = {p for _, p in self._retired}
            for name in os.listdir(self.mounts_dir):
                path = os.path.join(self.mounts_dir, name)
                if path != current and path not in retired:
                    self._retired.append((now, path))

    def _detach(self, path: str) -> None:
        try:
            unmount(path, lazy=True)
            os.rmdir(path)
        except (UnionError, OSError):
            pass  # retried at the next refresh or start

    def teardown(self) -> None:
        current = self._current()
        if os.path.islink(self.view):
            os.unlink(self.view)
        for path in [p for _, p in self._retired] + ([current] if current else []):
            self._detach(path)
        if os.path.isdir(self.mounts_dir):
            for name in os.listdir(self.mounts_dir):
                self._detach(os.path.join(self.mounts_dir, name))
        if mount_type(self.view):
            unmount(self.view)

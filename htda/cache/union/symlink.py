"""A tree of symbolic links: the view without privileges or mounts.

``view`` holds a real directory for every storage directory and a link for
every file: to the cache copy when one is held, to storage otherwise.  A link
is switched with a rename of a new link over the old one, so a job opening
it gets the old or the new target, never an error; a copy's link goes back
to storage *before* the copy is deleted.  New files in storage appear after
the next rescan (``rescan_interval`` seconds, default 300).  Links are plain
files on disk, so the view keeps working while the daemon is down.
"""

from __future__ import annotations

import os
import shutil

from ...lfn import lfn_parts, normalize_lfn
from ..confine import open_beneath, parent_beneath
from ..ownership import PRIVATE, Ownership, dir_perms
from .base import UnionDriver

__all__ = ["SymlinkDriver"]


class SymlinkDriver(UnionDriver):
    name = "symlink"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.rescan_interval = float(self.options.get("rescan_interval", 300.0))
        self._scanned = 0.0
        self._held: set[str] = set()

    def start(self, held: list[str]) -> None:
        os.makedirs(self.view, mode=0o700, exist_ok=True)  # each link gives it storage's root's perms
        self._held = set(held)
        self._rescan()

    def _rescan(self) -> None:
        self._scanned = self.clock.monotonic()
        for lfn in self._storage_files():
            if lfn not in self._held:
                self._link(lfn, self._storage_path(lfn))
        for lfn in self._held:
            self.added(lfn)

    def _storage_files(self):
        if not self.storage:
            return
        for dirpath, dirnames, filenames in os.walk(self.storage):
            # never follow links planted in storage: they could point anywhere
            dirnames[:] = [d for d in dirnames if not os.path.islink(os.path.join(dirpath, d))]
            for name in filenames:
                full = os.path.join(dirpath, name)
                if os.path.islink(full):
                    continue
                try:
                    yield normalize_lfn("/" + os.path.relpath(full, self.storage))
                except ValueError:
                    continue

    def _storage_path(self, lfn: str) -> str:
        return os.path.join(self.storage or "/nonexistent", lfn.lstrip("/"))

    def _in_storage(self, lfn: str) -> bool:
        """Whether storage has ``lfn`` without any symlink on the way (links could lead anywhere)."""
        if not self.storage:
            return False
        try:
            os.close(open_beneath(self.storage, lfn))
            return True
        except OSError:
            return False

    def _copy_path(self, lfn: str) -> str | None:
        for branch in self.branches:
            path = os.path.join(branch, lfn.lstrip("/"))
            if os.path.isfile(path) and not os.path.islink(path):
                return path
        return None

    def _view_dirs(self, lfn: str) -> Ownership:
        """The perms the view's directories of ``lfn`` get: storage's, or the copy's where storage has none
        (both mirror the source); read-only, since files created in the view would never reach storage."""
        found = dir_perms(self.storage, lfn) if self.storage else []
        for branch in self.branches:
            if len(found) >= len(lfn_parts(lfn)):
                break
            found += dir_perms(branch, lfn)[len(found):]
        return Ownership(PRIVATE, tuple(found)).read_only()

    def _link(self, lfn: str, target: str) -> None:
        with parent_beneath(self.view, lfn, create=True, visit=self._view_dirs(lfn).apply_dir) as (dir_fd, base):
            tmp = f".{base[:64]}.htda-{os.getpid()}"
            try:
                os.unlink(tmp, dir_fd=dir_fd)
            except FileNotFoundError:
                pass
            os.symlink(target, tmp, dir_fd=dir_fd)
            os.rename(tmp, base, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)

    def added(self, lfn: str) -> None:
        self._held.add(lfn)
        copy = self._copy_path(lfn)
        if copy:
            self._link(lfn, copy)

    def removing(self, lfn: str) -> None:
        self._held.discard(lfn)
        if not os.path.isdir(self.view):
            return  # not built yet: start() links storage
        if self._in_storage(lfn):
            self._link(lfn, self._storage_path(lfn))
        else:
            try:
                with parent_beneath(self.view, lfn) as (dir_fd, base):
                    os.unlink(base, dir_fd=dir_fd)
            except (FileNotFoundError, NotADirectoryError):
                pass

    def refresh(self) -> None:
        if self.clock.monotonic() - self._scanned >= self.rescan_interval:
            self._rescan()

    def teardown(self) -> None:
        shutil.rmtree(self.view, ignore_errors=True)

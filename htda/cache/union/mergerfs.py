"""mergerfs (FUSE): cache branches read-only and first, storage read-write last.

Lookups take the first branch holding a path (``category.search=ff``), so a
copy on a cache device wins over storage and a new copy is visible as soon as
it is renamed into place; a deleted copy falls through to storage at once.
Writes can only land on the one read-write branch, storage
(``category.create=ff`` skips read-only branches).  mergerfs runs as its own
daemon, so the view survives the HTDA node being stopped or killed; a node
that starts again adopts the mount and sets its branches at run time through
mergerfs's control file.
"""

from __future__ import annotations

import os
import shutil

from .base import UnionDriver, UnionError, mount_type, run, unmount

__all__ = ["MergerfsDriver"]

OPTIONS = ("allow_other", "category.create=ff", "category.search=ff", "cache.files=partial",
           "minfreespace=0", "fsname=htda-view", "dropcacheonclose=false", "fuse_msg_size=256")


class MergerfsDriver(UnionDriver):
    """Options: ``mount_options`` (extra comma-separated mergerfs options)."""

    name = "mergerfs"

    def branch_spec(self) -> str:
        for path in [*self.branches, self.storage or ""]:
            if ":" in path or "=" in path:
                raise UnionError(f"mergerfs cannot use a branch path containing ':' or '=': {path}")
        parts = [f"{b}=RO" for b in self.branches]
        if self.storage:
            parts.append(f"{self.storage}=RW")
        return ":".join(parts)

    def start(self, held: list[str]) -> None:
        if shutil.which("mergerfs") is None:
            raise UnionError("mergerfs is not installed (Debian package 'mergerfs')")
        os.makedirs(self.view, exist_ok=True)
        spec = self.branch_spec()
        if mount_type(self.view) == "fuse.mergerfs":
            os.setxattr(os.path.join(self.view, ".mergerfs"), "user.mergerfs.branches", spec.encode())
            return
        extra = [o for o in str(self.options.get("mount_options", "")).split(",") if o]
        run(["mergerfs", "-o", ",".join([*OPTIONS, *extra]), spec, self.view])
        if mount_type(self.view) != "fuse.mergerfs":
            raise UnionError(f"mergerfs did not mount {self.view}")

    def teardown(self) -> None:
        unmount(self.view)

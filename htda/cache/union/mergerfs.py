"""mergerfs (FUSE): cache branches read-only and first, storage read-write last.

Lookups take the first branch holding a path (``category.search=ff``), so a
copy on a cache device wins over storage and a new copy is visible as soon as
it is renamed into place; a deleted copy falls through to storage at once.
Writes can only land on the one read-write branch, storage
(``category.create=ff`` skips read-only branches).  mergerfs runs as its own
daemon, so the view survives the HTDA node being stopped or killed; a node
that starts again adopts the mount and sets its branches at run time through
mergerfs's control file.

mergerfs serves each request with the caller's uid and gid (``setfsuid``),
so a file a job writes lands in storage owned by the job's user; that
takes ``CAP_SETUID`` and ``CAP_SETGID``.  Without them it would write as
root, so the driver then mounts storage read-only: writes fail instead.
"""

from __future__ import annotations

import logging
import os
import shutil

from .base import UnionDriver, UnionError, mount_type, run, unmount

log = logging.getLogger("htda.cache.union")

__all__ = ["MergerfsDriver", "can_write_as_callers"]

#: capability numbers (linux/capability.h) mergerfs needs to act as each caller
CAP_SETGID, CAP_SETUID = 6, 7

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
            parts.append(f"{self.storage}={'RW' if can_write_as_callers() else 'RO'}")
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


def can_write_as_callers() -> bool:
    """Whether a mergerfs started by this process may take its callers' ids (else it writes as root)."""
    caps = {}
    with open("/proc/self/status") as fh:
        for line in fh:
            key, _, value = line.partition(":")
            if key in ("CapEff", "CapBnd"):
                caps[key] = int(value, 16)
    needed = (1 << CAP_SETUID) | (1 << CAP_SETGID)
    if all(v & needed == needed for v in caps.values()):
        return True
    log.warning("mergerfs view: no CAP_SETUID/CAP_SETGID, so it could only write as root: storage is read-only "
                "through the view")
    return False

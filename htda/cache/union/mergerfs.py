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

Reads are where FUSE costs: every read of a copy is a round trip through
the mergerfs daemon (a third of the device's rate, ``bench/cache_bench.py``).
With FUSE passthrough (Linux 6.9 on, mergerfs 2.40 on) mergerfs still opens
each file, as the caller, with every permission check, and then hands the
open file to the kernel, which reads it directly (measured at the device's
rate).  Option ``passthrough``: ``auto`` (the default) turns it on for files
opened read-only (``passthrough.io=ro``) where the installed mergerfs and
the kernel have it, ``on`` always (mergerfs refuses to mount where it
cannot), ``off`` never.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess

from .base import UnionDriver, UnionError, mount_type, run, unmount

log = logging.getLogger("htda.cache.union")

__all__ = ["MergerfsDriver", "can_write_as_callers", "kernel_version", "mergerfs_version", "parse_version",
           "passthrough_supported"]

#: capability numbers (linux/capability.h) mergerfs needs to act as each caller
CAP_SETGID, CAP_SETUID = 6, 7

#: the first mergerfs and Linux releases with FUSE passthrough
PASSTHROUGH_MERGERFS, PASSTHROUGH_KERNEL = (2, 40), (6, 9)
PASSTHROUGH_MODES = ("auto", "on", "off")

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
        mode = self._passthrough_mode()  # checked here, so a bad option is reported also when a mount is adopted
        os.makedirs(self.view, exist_ok=True)
        spec = self.branch_spec()
        if mount_type(self.view) == "fuse.mergerfs":
            os.setxattr(os.path.join(self.view, ".mergerfs"), "user.mergerfs.branches", spec.encode())
            return
        extra = [o for o in str(self.options.get("mount_options", "")).split(",") if o]
        if not any(o.startswith("passthrough.io") for o in extra) and self._passthrough(mode):
            extra.append("passthrough.io=ro")
        run(["mergerfs", "-o", ",".join([*OPTIONS, *extra]), spec, self.view])
        if mount_type(self.view) != "fuse.mergerfs":
            raise UnionError(f"mergerfs did not mount {self.view}")

    def _passthrough_mode(self) -> str:
        """The option ``passthrough``, checked (see the module docstring)."""
        mode = str(self.options.get("passthrough", "auto")).strip().lower()
        if mode not in PASSTHROUGH_MODES:
            raise UnionError(f"mergerfs option passthrough must be one of {', '.join(PASSTHROUGH_MODES)}, "
                             f"not {mode!r}")
        return mode

    def _passthrough(self, mode: str) -> bool:
        """Whether to mount with FUSE passthrough for reads, given the option's ``mode``."""
        if mode != "auto":
            return mode == "on"
        version, kernel = mergerfs_version(), kernel_version()
        shown = ".".join(map(str, version)) if version else "of unknown version"
        if version is not None and passthrough_supported(version, kernel):
            log.info("mergerfs view: reads of copies pass through to the kernel (mergerfs %s, Linux %d.%d)", shown,
                     *kernel)
            return True
        log.info("mergerfs view: every read goes through mergerfs (about a third of the device's rate): FUSE "
                 "passthrough needs mergerfs %d.%d and Linux %d.%d or later (mergerfs %s, Linux %d.%d here)",
                 *PASSTHROUGH_MERGERFS, *PASSTHROUGH_KERNEL, shown, *kernel)
        return False

    def teardown(self) -> None:
        unmount(self.view)


def mergerfs_version() -> tuple[int, ...] | None:
    """The installed mergerfs's version ("mergerfs version: 2.33.5", "mergerfs v2.42.0"); None if unknown."""
    try:
        done = subprocess.run(["mergerfs", "--version"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_version(done.stdout + done.stderr)


def parse_version(text: str) -> tuple[int, ...] | None:
    """The first dotted version number in ``text`` (major and minor at least)."""
    m = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
    return tuple(int(g) for g in m.groups() if g is not None) if m else None


def kernel_version(release: str | None = None) -> tuple[int, int]:
    """Major and minor of the running kernel (or of ``release``, as ``uname -r`` prints it)."""
    version = parse_version(release if release is not None else os.uname().release)
    return (version[0], version[1]) if version else (0, 0)


def passthrough_supported(mergerfs: tuple[int, ...], kernel: tuple[int, int]) -> bool:
    return tuple(mergerfs[:2]) >= PASSTHROUGH_MERGERFS and kernel >= PASSTHROUGH_KERNEL


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

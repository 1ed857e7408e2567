"""Path confinement: every LFN resolves beneath its root, whatever the file system holds.

``normalize_lfn`` already refuses ``..``, NUL bytes and over-long names.  What it
cannot see is the file system: a symlink planted in storage or in a cache
directory could still lead a lookup elsewhere.  So every lookup here walks the
LFN one segment at a time with ``O_NOFOLLOW`` relative to a directory file
descriptor of the root (``openat``), and refuses any symlink on the way.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from ..lfn import lfn_parts

__all__ = ["ConfinementError", "Visit", "open_beneath", "parent_beneath", "split_lfn"]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

#: ``visit(depth, dir_fd)``: called for the root (depth 0) and each directory on an LFN's way
Visit = Callable[[int, int], None]


class ConfinementError(OSError):
    """A lookup met a symlink or a non-directory where a directory was needed."""


def split_lfn(lfn: str) -> tuple[list[str], str]:
    """The directory segments and the base name of a valid LFN (ValueError otherwise)."""
    parts = lfn_parts(lfn)
    return parts[:-1], parts[-1]


def _open_dir(name: str, dir_fd: int, create: bool) -> int:
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        if not create:
            raise
        try:  # private until the caller's visit gives it its perms: no one sees in before that
            os.mkdir(name, 0o700, dir_fd=dir_fd)
        except FileExistsError:
            pass
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise ConfinementError(exc.errno, f"refusing to follow '{name}': not a plain directory") from None
        raise


@contextmanager
def parent_beneath(root: str | os.PathLike, lfn: str, create: bool = False,
                   visit: Visit | None = None) -> Iterator[tuple[int, str]]:
    """Yield ``(dir_fd, base_name)`` of the LFN's parent directory beneath ``root``.

    With ``create`` missing directories are made (mode 0700).  ``visit`` is
    called with each directory's depth and descriptor, the root first, e.g.
    to give it its owner and mode.  Symlinked directories are refused with
    :class:`ConfinementError`; the root itself is trusted config.
    """
    dirs, base = split_lfn(lfn)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        if visit is not None:
            visit(0, fd)
        for depth, name in enumerate(dirs, 1):
            nxt = _open_dir(name, fd, create)
            os.close(fd)
            fd = nxt
            if visit is not None:
                visit(depth, fd)
        yield fd, base
    finally:
        os.close(fd)


def open_beneath(root: str | os.PathLike, lfn: str, flags: int = os.O_RDONLY, mode: int = 0o600) -> int:
    """Open the LFN's file beneath ``root`` without following any symlink; return the fd."""
    with parent_beneath(root, lfn, create=bool(flags & os.O_CREAT)) as (dir_fd, base):
        try:
            return os.open(base, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise ConfinementError(exc.errno, f"refusing to follow symlink '{base}'") from None
            raise

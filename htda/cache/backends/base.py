"""The two backend interfaces: storage (fetch from) and cache devices (place on)."""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

from ...lfn import lfn_parts
from ..ownership import Ownership, Perms, RemoteRule

__all__ = ["FileStat", "Sink", "StorageBackend", "StorageError", "CacheDevice", "TemporaryCopy", "HeldFile"]

#: receives the bytes of a file in order, chunk by chunk
Sink = Callable[[memoryview], None]


class StorageError(Exception):
    """A storage operation failed; ``transient`` tells whether a retry may help."""

    def __init__(self, message: str, transient: bool = True):
        super().__init__(message)
        self.transient = transient


@dataclass(frozen=True)
class FileStat:
    """What a copy is checked against: size in bytes and modification time (unix seconds)."""

    size: int
    mtime: float

    def same_as(self, other: "FileStat", mtime_slack: float = 0.0) -> bool:
        return self.size == other.size and abs(self.mtime - other.mtime) <= mtime_slack


class StorageBackend(ABC):
    """Where files come from.  ``location`` is the backend's root (a path or a URL).

    ``stat`` raises :class:`FileNotFoundError` for a missing file and
    :class:`StorageError` for anything else.  ``read`` streams the file from
    ``offset`` to its end into ``sink``; backends that can start at an offset
    set ``supports_ranges`` so an interrupted copy resumes instead of restarting.
    """

    name: ClassVar[str] = ""
    supports_ranges: ClassVar[bool] = False

    def __init__(self, location: str, options: dict[str, Any] | None = None):
        self.location = location
        self.options = dict(options or {})
        # False where the mtime says when a caching proxy took the file, not which version it is (option
        # "mtime_stable"; the cache's storage_mtime_check): versions are then told apart by size (and checksums)
        self.mtime_stable = bool(self.options.get("mtime_stable", True))

    def same_version(self, now: FileStat, recorded: FileStat) -> bool:
        """Whether the source's stat ``now`` is the version ``recorded`` (at a copy's start, or in its meta)."""
        if not self.mtime_stable:
            return now.size == recorded.size
        return now.same_as(recorded, mtime_slack=1e-6)

    @abstractmethod
    def stat(self, lfn: str) -> FileStat:
        """Size and mtime of the LFN's file."""

    @abstractmethod
    def read(self, lfn: str, sink: Sink, offset: int = 0, buffer_size: int = 8 << 20) -> int:
        """Stream the file from ``offset`` into ``sink``; return the number of bytes delivered."""

    def copy_to_fd(self, lfn: str, out_fd: int, copied: Callable[[int, int], None], offset: int = 0,
                   chunk: int = 8 << 20) -> int | None:
        """Copy the file into ``out_fd`` inside the kernel, calling ``copied(position, length)`` per chunk.

        Returns the bytes copied, or None when this backend (or this pair of
        file systems) cannot, in which case the caller streams with :meth:`read`.
        """
        return None

    def ownership(self, lfn: str) -> Ownership:
        """Owner, group and modes a copy of ``lfn`` gets: storage's own where it has them (POSIX), else
        the site's rule for remote storage (option ``remote_rule``, default: root alone).  Fails like
        :meth:`stat`."""
        rule = self.options.get("remote_rule") or RemoteRule()
        return rule.ownership(len(lfn_parts(lfn)) - 1)

    def root_perms(self) -> Perms | None:
        """Owner, group and mode of storage's root where it has them (the view's root mirrors it)."""
        return None

    def checksum(self, lfn: str, kind: str) -> str | None:
        """The source's own checksum of ``kind`` if it can tell cheaply, else None."""
        return None

    def local_root(self) -> str | None:
        """A POSIX directory holding the LFN tree (for the union view), if there is one."""
        return None

    def describe(self) -> str:
        return f"{self.name}:{self.location}"


@dataclass
class HeldFile:
    """A validated copy found on a device; ``meta`` is what staging recorded with it."""

    lfn: str
    size: int
    mtime: float
    meta: dict[str, Any]


class TemporaryCopy(ABC):
    """A file being written under a temporary name; invisible until :meth:`commit`."""

    fd: int
    path: str

    @abstractmethod
    def commit(self, lfn: str, mtime: float, meta: dict[str, Any], ownership: Ownership | None = None) -> None:
        """fsync, record ``meta`` with the file, set its mtime, give it and its directories ``ownership``
        (default: root alone), and rename it into place atomically."""

    @abstractmethod
    def discard(self) -> None:
        """Remove the temporary file (idempotent)."""


class CacheDevice(ABC):
    """Where copies are placed.  Every LFN lives beneath the device's root."""

    name: ClassVar[str] = ""

    def __init__(self, path: str, options: dict[str, Any] | None = None):
        self.path = path
        self.options = dict(options or {})

    @abstractmethod
    def capacity_bytes(self) -> int:
        """Bytes this device may hold at most (its configured size, or the file system's)."""

    @abstractmethod
    def free_bytes(self) -> int:
        """Bytes still free on the file system beneath the device."""

    def filesystem_bytes(self) -> int:
        """Size of the file system beneath the device (watermarks keep a share of it free)."""
        return self.capacity_bytes()

    def filesystem_id(self) -> object:
        """What tells file systems apart: devices with the same id share their free space."""
        try:
            return os.stat(self.path).st_dev
        except OSError:
            return self.path  # not there (yet): on its own

    @abstractmethod
    def temporary(self, size_hint: int = 0) -> TemporaryCopy:
        """A new temporary file to stage into."""

    @abstractmethod
    def open(self, lfn: str) -> int:
        """A read-only fd of the copy of ``lfn`` (FileNotFoundError if not held)."""

    @abstractmethod
    def stat(self, lfn: str) -> FileStat:
        """Size and mtime of the copy of ``lfn``."""

    @abstractmethod
    def set_ownership(self, lfn: str, ownership: Ownership) -> None:
        """Give the copy of ``lfn`` and its directories ``ownership`` (the source's changed)."""

    @abstractmethod
    def set_root_perms(self, perms: Perms) -> None:
        """Give the root of the device's LFN tree (a view's root on a union) storage's root's perms."""

    @abstractmethod
    def delete(self, lfn: str) -> None:
        """Remove the copy of ``lfn`` (no error if absent)."""

    @abstractmethod
    def scan(self) -> Iterator[HeldFile]:
        """Every copy on the device with its recorded meta (for rebuilding the index)."""

    @abstractmethod
    def clean_temporaries(self) -> int:
        """Remove leftover temporary files (from a crash); return how many."""

    @abstractmethod
    def branches(self) -> list[str]:
        """Directories holding the LFN trees, in the order the union view should stack them."""

    def devices(self) -> list["CacheDevice"]:
        """The physical devices behind this one (itself, unless logical)."""
        return [self]

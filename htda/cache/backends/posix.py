"""POSIX backends: a storage directory (local or NFS) and a cache directory on a local disk."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import secrets
import stat as statmod
from collections.abc import Callable, Iterator
from typing import Any

from ...lfn import normalize_lfn
from ..confine import ConfinementError, open_beneath, parent_beneath
from .base import CacheDevice, FileStat, HeldFile, Sink, StorageBackend, StorageError, TemporaryCopy

__all__ = ["PosixStorage", "PosixDevice", "META_XATTR", "read_fd"]

META_XATTR = "user.htda.meta"


def _stat_of(st: os.stat_result) -> FileStat:
    return FileStat(st.st_size, st.st_mtime_ns / 1e9)


def read_fd(fd: int, sink: Sink, offset: int, buffer_size: int) -> int:
    """Stream an open file from ``offset`` into ``sink`` through one reused buffer."""
    buf = bytearray(buffer_size)
    view = memoryview(buf)
    total = 0
    position = offset
    os.lseek(fd, offset, os.SEEK_SET)
    while True:
        # ask for the next chunks now, so the disk reads them while the sink writes and checksums this one
        os.posix_fadvise(fd, position + buffer_size, 2 * buffer_size, os.POSIX_FADV_WILLNEED)
        n = os.readv(fd, [buf])
        if n == 0:
            return total
        sink(view[:n])
        total += n
        position += n


class PosixStorage(StorageBackend):
    """Files under a directory; symlinks inside it are never followed."""

    name = "posix"
    supports_ranges = True

    def _open(self, lfn: str) -> int:
        try:
            return open_beneath(self.location, lfn)
        except ConfinementError as exc:
            raise StorageError(f"{lfn}: {exc.strerror}", transient=False) from None
        except NotADirectoryError:
            raise FileNotFoundError(errno.ENOENT, "no such file", lfn) from None

    def stat(self, lfn: str) -> FileStat:
        fd = self._open(lfn)
        try:
            st = os.fstat(fd)
        finally:
            os.close(fd)
        if not statmod.S_ISREG(st.st_mode):
            raise StorageError(f"{lfn}: not a regular file", transient=False)
        return _stat_of(st)

    def read(self, lfn: str, sink: Sink, offset: int = 0, buffer_size: int = 8 << 20) -> int:
        fd = self._open(lfn)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
            return read_fd(fd, sink, offset, buffer_size)
        finally:
            os.close(fd)

    def copy_to_fd(self, lfn: str, out_fd: int, copied: Callable[[int, int], None], offset: int = 0,
                   chunk: int = 8 << 20) -> int | None:
        fd = self._open(lfn)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
            total = 0
            while True:
                position = offset + total
                # the kernel copy reads synchronously: ask for the next chunks now, as read_fd does
                os.posix_fadvise(fd, position + chunk, 2 * chunk, os.POSIX_FADV_WILLNEED)
                try:
                    n = os.copy_file_range(fd, out_fd, chunk, position, position)
                except OSError as exc:
                    if total == 0 and exc.errno in (errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL):
                        return None  # another file system pair: stream instead
                    raise
                if n == 0:
                    return total
                copied(position, n)
                total += n
        finally:
            os.close(fd)

    def local_root(self) -> str | None:
        return self.location


class _PosixTemporary(TemporaryCopy):
    def __init__(self, device: "PosixDevice", name: str, fd: int):
        self.device, self.name, self.fd = device, name, fd
        self.path = os.path.join(device.staging_dir, name)
        self._done = False

    def commit(self, lfn: str, mtime: float, meta: dict[str, Any]) -> None:
        lfn = normalize_lfn(lfn)
        os.fsync(self.fd)
        ns = int(round(mtime * 1e9))
        os.utime(self.fd, ns=(ns, ns))
        self.device.write_meta(self.fd, lfn, meta)
        with parent_beneath(self.device.data_dir, lfn, create=True) as (dir_fd, base):
            staging_fd = os.open(self.device.staging_dir, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.rename(self.name, base, src_dir_fd=staging_fd, dst_dir_fd=dir_fd)
            finally:
                os.close(staging_fd)
            os.fsync(dir_fd)  # the rename itself must survive a crash
        os.close(self.fd)
        self._done = True

    def discard(self) -> None:
        if self._done:
            return
        self._done = True
        os.close(self.fd)
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


class PosixDevice(CacheDevice):
    """Copies under ``<path>/data/<lfn>``, temporaries under ``<path>/staging``.

    Only ``data`` is a union-view branch, so a temporary file is never visible.
    The staging meta (source stat, checksum) travels with the file as an
    extended attribute, set before the rename, so data and meta appear
    together; file systems without user xattrs get a sidecar under ``meta``.
    Options: ``capacity`` (bytes, 0 = the whole file system).
    """

    name = "posix"

    def __init__(self, path: str, options: dict[str, Any] | None = None):
        super().__init__(path, options)
        self.data_dir = os.path.join(path, "data")
        self.staging_dir = os.path.join(path, "staging")
        self.meta_dir = os.path.join(path, "meta")
        for d in (self.data_dir, self.staging_dir):
            os.makedirs(d, exist_ok=True)
        self._xattrs = _xattrs_work(self.staging_dir)

    # -- space ---------------------------------------------------------------
    def capacity_bytes(self) -> int:
        configured = int(self.options.get("capacity") or 0)
        st = os.statvfs(self.path)
        return configured or st.f_blocks * st.f_frsize

    def free_bytes(self) -> int:
        st = os.statvfs(self.path)
        return st.f_bavail * st.f_frsize

    def filesystem_bytes(self) -> int:
        st = os.statvfs(self.path)
        return st.f_blocks * st.f_frsize

    # -- files ---------------------------------------------------------------
    def temporary(self, size_hint: int = 0) -> TemporaryCopy:
        name = f".htda-{secrets.token_hex(8)}"
        fd = os.open(os.path.join(self.staging_dir, name), os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        if size_hint > 0:
            try:  # reserve the space up front: a full device fails now, not half-way
                os.posix_fallocate(fd, 0, size_hint)
            except OSError as exc:
                os.close(fd)
                os.unlink(os.path.join(self.staging_dir, name))
                raise StorageError(f"cannot reserve {size_hint} bytes on {self.path}: {exc.strerror}",
                                   transient=False) from None
        return _PosixTemporary(self, name, fd)

    def open(self, lfn: str) -> int:
        return open_beneath(self.data_dir, lfn)

    def stat(self, lfn: str) -> FileStat:
        fd = self.open(lfn)
        try:
            return _stat_of(os.fstat(fd))
        finally:
            os.close(fd)

    def delete(self, lfn: str) -> None:
        try:
            with parent_beneath(self.data_dir, lfn) as (dir_fd, base):
                os.unlink(base, dir_fd=dir_fd)
        except (FileNotFoundError, NotADirectoryError):
            pass
        self._drop_sidecar(lfn)

    def scan(self) -> Iterator[HeldFile]:
        for dirpath, dirnames, filenames in os.walk(self.data_dir):
            dirnames[:] = [d for d in dirnames if not os.path.islink(os.path.join(dirpath, d))]
            for fname in filenames:
                full = os.path.join(dirpath, fname)
                lfn = "/" + os.path.relpath(full, self.data_dir)
                try:
                    lfn = normalize_lfn(lfn)
                    fd = open_beneath(self.data_dir, lfn)
                except (ValueError, OSError):
                    continue  # a symlink or an odd name: not ours, never served as a copy
                try:
                    st = os.fstat(fd)
                    meta = self.read_meta(fd, lfn) if statmod.S_ISREG(st.st_mode) else None
                finally:
                    os.close(fd)
                yield HeldFile(lfn, st.st_size, st.st_mtime_ns / 1e9, meta or {})

    def clean_temporaries(self) -> int:
        count = 0
        for name in os.listdir(self.staging_dir):
            try:
                os.unlink(os.path.join(self.staging_dir, name))
                count += 1
            except OSError:
                pass
        return count

    def branches(self) -> list[str]:
        return [self.data_dir]

    # -- meta ----------------------------------------------------------------
    def write_meta(self, fd: int, lfn: str, meta: dict[str, Any]) -> None:
        blob = json.dumps(meta, sort_keys=True).encode()
        if self._xattrs:
            os.setxattr(fd, META_XATTR, blob)
            return
        os.makedirs(self.meta_dir, exist_ok=True)
        tmp = self._sidecar(lfn) + ".tmp"
        with open(tmp, "wb") as fh:
            fh.write(blob)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self._sidecar(lfn))

    def read_meta(self, fd: int, lfn: str) -> dict[str, Any] | None:
        try:
            blob = os.getxattr(fd, META_XATTR) if self._xattrs else open(self._sidecar(lfn), "rb").read()
            meta = json.loads(blob)
        except (OSError, ValueError):
            return None
        return meta if isinstance(meta, dict) else None

    def _sidecar(self, lfn: str) -> str:
        return os.path.join(self.meta_dir, hashlib.sha256(lfn.encode()).hexdigest())

    def _drop_sidecar(self, lfn: str) -> None:
        if not self._xattrs:
            try:
                os.unlink(self._sidecar(lfn))
            except FileNotFoundError:
                pass


def _xattrs_work(directory: str) -> bool:
    probe = os.path.join(directory, f".xattr-probe-{secrets.token_hex(4)}")
    try:
        with open(probe, "wb") as fh:
            os.setxattr(fh.fileno(), META_XATTR, b"{}")
        return True
    except OSError:
        return False
    finally:
        try:
            os.unlink(probe)
        except OSError:
            pass

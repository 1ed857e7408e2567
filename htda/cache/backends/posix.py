"""POSIX backends: a storage directory (local or NFS) and a cache directory on a local disk."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import secrets
import stat as statmod
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ...lfn import normalize_lfn
from ..confine import ConfinementError, open_beneath, parent_beneath
from ..ownership import PRIVATE, Ownership, Perms
from .base import CacheDevice, FileStat, HeldFile, Sink, StorageBackend, StorageError, TemporaryCopy

__all__ = ["PosixStorage", "PosixDevice", "META_XATTR", "read_fd"]

#: copies belong to their sources' owners, who may set ``user.*`` attributes of their own files: as root the
#: meta goes where only root writes (``trusted.*``); ``user.*`` is the unprivileged fallback (and the old name)
LEGACY_XATTR = "user.htda.meta"
META_XATTR = "trusted.htda.meta" if os.geteuid() == 0 else LEGACY_XATTR
#: opens a copy to change its owner: never follows a link, never blocks on a FIFO planted in its place
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


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

    @contextmanager
    def _lookup(self, lfn: str) -> Iterator[None]:
        """Storage's errors for a lookup: a symlink on the way is permanent, a file as a directory missing."""
        try:
            yield
        except ConfinementError as exc:
            raise StorageError(f"{lfn}: {exc.strerror}", transient=False) from None
        except (NotADirectoryError, FileNotFoundError):
            if not os.path.isdir(self.location):  # the whole storage is missing, not this file: say so
                raise StorageError(f"storage root {self.location} does not exist (not mounted?)",
                                   transient=True) from None
            raise FileNotFoundError(errno.ENOENT, f"{lfn}: no such file in storage {self.location}") from None

    def _open(self, lfn: str) -> int:
        with self._lookup(lfn):
            return open_beneath(self.location, lfn)

    def ownership(self, lfn: str) -> Ownership:
        """The file's owner, group and mode, and those of the root and every directory on its way."""
        dirs: list[Perms] = []
        with self._lookup(lfn), parent_beneath(self.location, lfn,
                                               visit=lambda depth, fd: dirs.append(Perms.of(os.fstat(fd)))) as (
                dir_fd, base):
            st = os.stat(base, dir_fd=dir_fd, follow_symlinks=False)
        if not statmod.S_ISREG(st.st_mode):
            raise StorageError(f"{lfn}: not a regular file", transient=False)
        return Ownership(Perms.of(st), tuple(dirs))

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

    def root_perms(self) -> Perms | None:
        try:
            return Perms.of(os.stat(self.location))
        except OSError:
            return None


class _PosixTemporary(TemporaryCopy):
    def __init__(self, device: "PosixDevice", name: str, fd: int):
        self.device, self.name, self.fd = device, name, fd
        self.path = os.path.join(device.staging_dir, name)
        self._done = False

    def commit(self, lfn: str, mtime: float, meta: dict[str, Any], ownership: Ownership | None = None) -> None:
        lfn = normalize_lfn(lfn)
        ownership = ownership or Ownership.private()
        os.fsync(self.fd)
        ns = int(round(mtime * 1e9))
        os.utime(self.fd, ns=(ns, ns))
        self.device.write_meta(self.fd, lfn, meta)
        ownership.file.read_only().apply(self.fd)  # before the rename: never visible with other perms
        with parent_beneath(self.device.data_dir, lfn, create=True, visit=ownership.apply_dir) as (dir_fd, base):
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
        # the device's own directory lets users pass (to data/) but not list; staging and meta are root's alone;
        # data/ is the view's root on a union, its perms mirror storage's root (see ownership)
        _private_dir(path, keep=0o711)
        _private_dir(self.staging_dir, keep=0o700)
        if not os.path.isdir(self.data_dir):
            os.mkdir(self.data_dir, 0o755)
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
        fd = os.open(os.path.join(self.staging_dir, name), os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC,
                     PRIVATE.mode)  # root's alone until commit gives it the source's perms
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

    def set_ownership(self, lfn: str, ownership: Ownership) -> None:
        with parent_beneath(self.data_dir, lfn, visit=ownership.apply_dir) as (dir_fd, base):
            fd = os.open(base, _FILE_FLAGS, dir_fd=dir_fd)
        try:
            if not statmod.S_ISREG(os.fstat(fd).st_mode):
                raise FileNotFoundError(errno.ENOENT, "not a copy (no regular file)", lfn)
            ownership.file.read_only().apply(fd)
        finally:
            os.close(fd)

    def set_root_perms(self, perms: Perms) -> None:
        perms.apply_to_dir(self.data_dir)

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
                    meta = self.read_meta(fd, lfn, st) if statmod.S_ISREG(st.st_mode) else None
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
        _private_dir(self.meta_dir, keep=0o700)
        tmp = self._sidecar(lfn) + ".tmp"
        with open(tmp, "wb") as fh:
            fh.write(blob)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self._sidecar(lfn))

    def read_meta(self, fd: int, lfn: str, st: os.stat_result | None = None) -> dict[str, Any] | None:
        """The meta recorded with a copy; a copy an older HTDA made (root's, meta in ``user.*``) is moved to
        the trusted attribute.  ``user.*`` meta of a file root does not own is never believed."""
        try:
            if not self._xattrs:
                blob = open(self._sidecar(lfn), "rb").read()
            elif META_XATTR != LEGACY_XATTR and (st or os.fstat(fd)).st_uid == 0 and _has_legacy(fd):
                blob = os.getxattr(fd, LEGACY_XATTR)
                os.setxattr(fd, META_XATTR, blob)
                os.removexattr(fd, LEGACY_XATTR)
            else:
                blob = os.getxattr(fd, META_XATTR)
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


def _has_legacy(fd: int) -> bool:
    return LEGACY_XATTR in os.listxattr(fd) and META_XATTR not in os.listxattr(fd)


def _private_dir(path: str, keep: int) -> None:
    """Make ``path`` (mode ``keep``) or narrow an existing one to at most ``keep``: a restart never widens it."""
    os.makedirs(path, mode=keep, exist_ok=True)
    mode = statmod.S_IMODE(os.stat(path).st_mode)
    if mode & ~keep:
        os.chmod(path, mode & keep)


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

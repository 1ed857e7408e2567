"""Which files jobs on this worker are reading right now, through the view or from storage.

The coordinator defers the copy of a file that jobs are streaming from
storage (see :mod:`htda.coordinator.reads` for why), so a cache node reports
the LFNs its worker's jobs have open.  Two ways to learn them:

fanotify (the default, needs ``CAP_SYS_ADMIN``, which mounting needs anyway)
    A notification group (``FAN_CLASS_NOTIF``) receives ``FAN_OPEN`` and
    ``FAN_CLOSE`` for every file opened on the view's file systems: each
    mount a read root of the driver is (the mergerfs mount, every overlayfs
    generation, storage when it is a mount of its own) gets a
    ``FAN_MARK_FILESYSTEM`` mark, so opens through bind mounts of the view in
    jobs' own mount namespaces (containers, ``MOUNT_UNDER_SCRATCH``) count
    too.  A read root that is a plain directory (the symlink view: its links
    lead into storage, so opens land there) gets a ``FAN_MARK_MOUNT`` mark on
    the mount holding it, which limits the events to that mount.  A thread
    counts open file descriptions per file (device, inode) and per process;
    a report maps each file still open to its LFN.  No other process's
    ``/proc`` is read: the unit needs no ``CAP_SYS_PTRACE``.
/proc scan (the fallback when fanotify is unavailable: no ``CAP_SYS_ADMIN``,
    an old kernel, a system-call filter)
    Resolves ``/proc/<pid>/fd/*``; other users' descriptors need root with
    ``CAP_SYS_PTRACE``, without it only the node's own user's are seen.

Which one runs is logged once per view.  What fanotify sees differs in three
ways: only files opened after the watch started (a daemon restarted while
jobs read learns of their files at their next open), memory-mapped files
count until they are unmapped (a descriptor scan misses them once the
descriptor is closed), and files deleted while open are not reported (as
before).  In another mount namespace a file resolves relative to the mount
the job opened it through: a bind mount of the whole view maps back to its
LFN, a bind mount of a subdirectory does not.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import logging
import os
import select
import struct
import threading
import weakref
from collections.abc import Callable, Iterable
from typing import Protocol

from ..lfn import normalize_lfn
from ..node.clock import SYSTEM_CLOCK, Clock

__all__ = ["open_lfns", "parse_events", "scan_proc", "watch", "rewatch", "unwatch", "FanotifyWatch",
           "FanotifyUnavailable", "OpenFile"]

log = logging.getLogger("htda.cache.readers")

# <linux/fanotify.h>
FAN_CLOEXEC, FAN_NONBLOCK, FAN_CLASS_NOTIF = 0x1, 0x2, 0x0
FAN_MARK_ADD, FAN_MARK_MOUNT, FAN_MARK_FILESYSTEM = 0x1, 0x10, 0x100
FAN_CLOSE_WRITE, FAN_CLOSE_NOWRITE, FAN_OPEN, FAN_Q_OVERFLOW = 0x8, 0x10, 0x20, 0x4000
FAN_CLOSE = FAN_CLOSE_WRITE | FAN_CLOSE_NOWRITE
FANOTIFY_METADATA_VERSION = 3
AT_FDCWD = -100
#: struct fanotify_event_metadata: event_len, vers, reserved, metadata_len, mask, fd, pid
METADATA = struct.Struct("=IBBHQii")
#: events read before they are handled: each holds a descriptor until then
READ_BATCH = 128
#: seconds between checks that the view still points at a marked mount, should inotify not say so at once
RECHECK = 1.0
# <sys/inotify.h>: the view link swapped into place (overlayfs renames a new link over it on remount)
IN_CREATE, IN_MOVED_TO, IN_NONBLOCK, IN_CLOEXEC = 0x100, 0x80, os.O_NONBLOCK, os.O_CLOEXEC


class Driver(Protocol):
    """What the watch needs of a union driver (:class:`htda.cache.union.base.UnionDriver`)."""

    view: str

    def read_roots(self) -> list[str]: ...

    def lfn_of(self, path: str) -> str | None: ...


class FanotifyUnavailable(OSError):
    """fanotify cannot be used here (no CAP_SYS_ADMIN, no kernel support, a system-call filter)."""


# -- the /proc scan (fallback) ------------------------------------------------------------------------------------
def _pids(proc: str) -> list[str]:
    try:
        return [name for name in os.listdir(proc) if name.isdigit()]
    except OSError:
        return []


def _targets(fd_dir: str) -> list[str]:
    try:
        names = os.listdir(fd_dir)
    except OSError:  # gone, or another user's without the capability
        return []
    out = []
    for name in names:
        try:
            out.append(os.readlink(os.path.join(fd_dir, name)))
        except OSError:
            continue
    return out


def _lfns(paths: Iterable[str], lfn_of: Callable[[str], str | None]) -> set[str]:
    """The normalised LFNs of ``paths`` (absolute, not deleted) as ``lfn_of`` maps them."""
    found: set[str] = set()
    for path in paths:
        if not path.startswith("/") or path.endswith(" (deleted)"):
            continue
        lfn = lfn_of(path)
        if lfn is None:
            continue
        try:
            found.add(normalize_lfn(lfn))
        except ValueError:  # e.g. a path with ".." that only looked like it was beneath a root
            continue
    return found


def scan_proc(lfn_of: Callable[[str], str | None], proc: str = "/proc",
              skip_pids: frozenset[int] = frozenset()) -> set[str]:
    """LFNs some process (other than ``skip_pids``) has an open descriptor of, from ``<proc>/<pid>/fd``."""
    targets = [t for pid in _pids(proc) if int(pid) not in skip_pids
               for t in _targets(os.path.join(proc, pid, "fd"))]
    return _lfns(targets, lfn_of)


# -- fanotify ------------------------------------------------------------------------------------------------------
def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    libc.fanotify_init.argtypes = [ctypes.c_uint, ctypes.c_uint]
    libc.fanotify_init.restype = ctypes.c_int
    libc.fanotify_mark.argtypes = [ctypes.c_int, ctypes.c_uint, ctypes.c_uint64, ctypes.c_int, ctypes.c_char_p]
    libc.fanotify_mark.restype = ctypes.c_int
    libc.inotify_init1.argtypes = [ctypes.c_int]
    libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
    return libc


def _alive(pid: int) -> bool:
    """Whether ``pid`` exists; signal 0 needs no capability to tell (EPERM means it exists)."""
    if pid <= 0:  # not visible in our PID namespace: keep, a close or a later prune settles it
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def parse_events(data: bytes) -> list[tuple[int, int, int]]:
    """(mask, fd, pid) of each fanotify event in ``data``; the parse stops at a layout it does not know."""
    out: list[tuple[int, int, int]] = []
    offset = 0
    while offset + METADATA.size <= len(data):
        length, version, _, _, mask, fd, pid = METADATA.unpack_from(data, offset)
        if version != FANOTIFY_METADATA_VERSION or length < METADATA.size:
            break  # not a layout we know: stop rather than misread
        out.append((mask, fd, pid))
        offset += length
    return out


class OpenFile:
    """One file jobs have open: where it was opened and how many open file descriptions each process holds."""

    __slots__ = ("path", "holders")

    def __init__(self, path: str):
        self.path = path
        self.holders: dict[int, int] = {}

    def opened(self, pid: int) -> None:
        self.holders[pid] = self.holders.get(pid, 0) + 1

    def closed(self, pid: int) -> None:
        """One open file description closed.  The closing process may not be the opener (a child that
        inherited the descriptor closes it last), so another holder's count goes down instead."""
        pid = pid if pid in self.holders else next(iter(self.holders), pid)
        if pid in self.holders:
            self.holders[pid] -= 1
            if self.holders[pid] <= 0:
                del self.holders[pid]

    def prune(self) -> bool:
        """Forget holders that no longer exist (their close may have been missed: a queue overflow); whether
        any holder is left."""
        self.holders = {pid: n for pid, n in self.holders.items() if _alive(pid)}
        return bool(self.holders)


class FanotifyWatch:
    """Counts the files opened beneath a driver's read roots from fanotify events, in a thread of its own.

    Raises :class:`FanotifyUnavailable` when fanotify cannot be initialised.
    """

    def __init__(self, driver: Driver, libc: ctypes.CDLL | None = None, clock: Clock = SYSTEM_CLOCK):
        #: whose ``monotonic()`` stamps each event (the cache's clock: copies' ``visible_since`` are on it too)
        self.clock = clock
        # weakly: the registry below keys watches by driver, and a strong reference back would keep both forever
        self._driver = weakref.ref(driver)
        self.view = driver.view
        self._libc = libc or _libc()
        fd = self._libc.fanotify_init(FAN_CLOEXEC | FAN_NONBLOCK | FAN_CLASS_NOTIF,
                                      os.O_RDONLY | os.O_LARGEFILE | os.O_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            raise FanotifyUnavailable(err, f"fanotify_init: {os.strerror(err)}")
        self._fd = fd
        # guards _files, _prefixes, _roots and marked: this watch's thread and a query (open_lfns, from the
        # htda-cache-reads thread) both refresh the marks and handle events; on_open is called under it
        self._lock = threading.Lock()
        self._drain_lock = threading.Lock()  # the thread and a query both drain: events must be handled in order
        self._files: dict[tuple[int, int], OpenFile] = {}
        self._roots: dict[int, str] = {}  # st_dev of a marked mount's root -> its path, for foreign namespaces
        self._prefixes: tuple[str, ...] = ()
        self._view_target = ""
        self._view_is_mount = False
        self._own_pid = os.getpid()
        #: called with (path, size, seen) for each open a job makes beneath a mounted view (not this process's
        #: own), ``seen`` being the monotonic time its event was read: the open happened no later (handling an
        #: event may wait on a slow file system, reading them does not); under ``_lock``, so it must not call
        #: back into the watch
        self.on_open: Callable[[str, int, float], None] | None = None
        self._mark_errors: set[tuple[str, int]] = set()
        self.overflows = 0
        self.marked: list[str] = []
        self._stop_r, self._stop_w = os.pipe2(os.O_CLOEXEC)
        self._swaps = self._watch_swaps()
        self.refresh()
        self._thread = threading.Thread(target=self._run, name="htda-cache-readers", daemon=True)
        self._thread.start()

    # -- marks ---------------------------------------------------------------------------------------------------
    def refresh(self) -> None:
        """Mark the mounts of the driver's read roots (idempotent: a mark already there is kept)."""
        driver = self._driver()
        if driver is None:
            return
        roots = [os.path.realpath(r) for r in driver.read_roots()]
        view_is_mount = os.path.ismount(os.path.realpath(self.view))
        marked, devices = [], {}
        for root in roots:
            is_mount = os.path.ismount(root)
            if view_is_mount and not is_mount:
                continue  # mergerfs/overlayfs: a plain storage directory is read through the view, not marked
            flags = FAN_MARK_FILESYSTEM if is_mount else FAN_MARK_MOUNT
            if self._mark(root, flags):
                marked.append(root)
                if is_mount:
                    devices[os.stat(root).st_dev] = root
        with self._lock:
            self._prefixes = tuple(r.rstrip("/") + "/" for r in roots)
            self._roots = devices
            self.marked = marked
        self._view_target = os.path.realpath(self.view)
        self._view_is_mount = view_is_mount

    def _watch_swaps(self) -> int:
        """An inotify descriptor that becomes readable when an entry is created or renamed into the view's
        directory (a new view link: overlayfs mounted a new generation), or -1 (the periodic check remains)."""
        fd = self._libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            return -1
        if self._libc.inotify_add_watch(fd, os.fsencode(os.path.dirname(self.view)), IN_CREATE | IN_MOVED_TO) < 0:
            os.close(fd)
            return -1
        return fd

    def _mark(self, path: str, flags: int) -> bool:
        rc = self._libc.fanotify_mark(self._fd, FAN_MARK_ADD | flags, FAN_OPEN | FAN_CLOSE, AT_FDCWD,
                                      os.fsencode(path))
        if rc == 0:
            return True
        err = ctypes.get_errno()
        if err != errno.ENOENT and (path, err) not in self._mark_errors:  # a root not there yet is retried
            self._mark_errors.add((path, err))
            log.warning("fanotify cannot watch %s: %s; jobs' reads there are not seen", path, os.strerror(err))
        return False

    # -- events ---------------------------------------------------------------------------------------------------
    def _run(self) -> None:
        poller = select.poll()
        poller.register(self._fd, select.POLLIN)
        poller.register(self._stop_r, select.POLLIN)
        if self._swaps >= 0:
            poller.register(self._swaps, select.POLLIN)
        while True:
            ready = {fd for fd, _ in poller.poll(RECHECK * 1000)}
            if self._stop_r in ready:
                return
            if self._swaps in ready:
                self._discard(self._swaps)
            if os.path.realpath(self.view) != self._view_target:
                self.refresh()  # overlayfs mounted a new generation: watch it before jobs open files there
            if self._fd in ready:
                self._drain()

    @staticmethod
    def _discard(fd: int) -> None:
        """Read and drop what ``fd`` has (inotify: only *that* something changed matters)."""
        try:
            while os.read(fd, 4096):
                pass
        except OSError:
            pass

    def _drain(self) -> None:
        with self._drain_lock:
            self._drain_locked()

    def _drain_locked(self) -> None:
        while True:
            read = self._read_some()
            for mask, fd, pid, seen in read:
                self._handle(mask, fd, pid, seen)
            if len(read) < READ_BATCH:
                return

    def _read_some(self) -> list[tuple[int, int, int, float]]:
        """Up to ``READ_BATCH`` queued events, each with the monotonic time just before it was read.

        One event per read: the read is where the kernel opens the event's file, which through a FUSE view
        backed by remote storage can take seconds, and the time before a read bounds only the event at the
        queue's head (the open it reports happened no later)."""
        out: list[tuple[int, int, int, float]] = []
        while len(out) < READ_BATCH:
            seen = self.clock.monotonic()
            try:
                data = os.read(self._fd, METADATA.size)
            except BlockingIOError:
                break
            except OSError as exc:  # the kernel could not open a descriptor for an event: that event is lost
                if exc.errno == errno.EINVAL:  # an event longer than we asked for: not a layout we know
                    log.error("fanotify: unexpected event layout; job opens are no longer seen")
                    break
                log.debug("fanotify read: %s", exc)
                continue
            if not data:
                break
            out.extend((mask, fd, pid, seen) for mask, fd, pid in parse_events(data))
        return out

    def _handle(self, mask: int, fd: int, pid: int, seen: float) -> None:
        if fd < 0:
            if mask & FAN_Q_OVERFLOW:
                self.overflows += 1
                log.warning("fanotify queue overflowed: some opens and closes were missed")
            return
        try:
            path = os.readlink(f"/proc/self/fd/{fd}")
            st = os.fstat(fd)
        except OSError:
            return
        finally:
            os.close(fd)
        key = (st.st_dev, st.st_ino)
        opened, closed = mask & FAN_OPEN, mask & FAN_CLOSE
        with self._lock:
            if opened and not closed:
                local = self._local_path(path, key)
                if local is not None:
                    entry = self._files.setdefault(key, OpenFile(local))
                    if pid not in entry.holders:  # a reader's further opens of a file it has open read it alike
                        self._count_open(local, pid, st.st_size, seen)
                    entry.opened(pid)
            elif closed and not opened and key in self._files:
                entry = self._files[key]
                entry.closed(pid)
                if not entry.holders:
                    del self._files[key]
            elif opened and closed:
                # an open and a close by one process merged before we read them (a short read while the queue
                # waited): the holders stay as they were; a process that did not hold the file opened it
                held = self._files.get(key)
                if held is None or pid not in held.holders:
                    local = self._local_path(path, key)
                    if local is not None:
                        self._count_open(local, pid, st.st_size, seen)

    def _count_open(self, path: str, pid: int, size: int, seen: float) -> None:
        """Tell ``on_open`` of a job's first open of a file through a mounted view.  Only there: the same open
        reaches the storage mount behind it again (from the union daemon), and a link view's cache hits are on
        devices that are not marked."""
        if (self.on_open is not None and self._view_is_mount and pid != self._own_pid
                and path.startswith(self._view_target.rstrip("/") + "/")):
            try:
                self.on_open(path, size, seen)
            except Exception:  # noqa: BLE001 - a counting bug must not end the watch (eviction relies on it)
                log.exception("counting an open of %s failed", path)

    def _local_path(self, path: str, key: tuple[int, int]) -> str | None:
        """``path`` as this process sees it beneath a read root, or None when it is not beneath one.

        An open in another mount namespace shows that namespace's path (or, once it is gone, the path beneath
        the mount); for a bind mount of a marked file system's root (the whole view) some tail of it is the
        path beneath our root.  The longest tail naming the very file (device and inode) wins, so a bind mount
        of a subdirectory maps to nothing rather than to a wrong LFN."""
        if path.startswith(self._prefixes):
            return path
        root = self._roots.get(key[0])
        if root is None or not path.startswith("/"):
            return None
        parts = path.split("/")
        for start in range(1, len(parts) - 1):
            candidate = "/".join([root.rstrip("/"), *parts[start:]])
            try:
                st = os.stat(candidate)
            except OSError:
                continue
            if (st.st_dev, st.st_ino) == key:
                return candidate
        return None

    # -- queries -------------------------------------------------------------------------------------------------
    def open_paths(self, skip_pids: frozenset[int] = frozenset()) -> list[str]:
        """Paths of files that a live process other than ``skip_pids`` has open and that still exist."""
        with self._lock:
            for key, entry in list(self._files.items()):
                if not entry.prune():
                    del self._files[key]
            held = [e.path for e in self._files.values() if set(e.holders) - skip_pids]
        return [p for p in held if os.path.lexists(p)]  # deleted while open: no LFN any more

    def open_lfns(self, lfn_of: Callable[[str], str | None], skip_pids: frozenset[int] = frozenset()) -> set[str]:
        """LFNs that some process other than ``skip_pids`` has open, as ``lfn_of`` maps their paths."""
        self.refresh()
        self._drain()  # what is queued already: an open that returned before this call is counted
        return _lfns(self.open_paths(skip_pids), lfn_of)

    def close(self) -> None:
        """Stop the thread and drop the marks (closing the group removes them)."""
        try:
            os.write(self._stop_w, b"x")
        except OSError:
            pass
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(5)
        for fd in (self._fd, self._stop_r, self._stop_w, self._swaps):
            try:
                os.close(fd)
            except OSError:
                pass


# -- one watch per driver ----------------------------------------------------------------------------------------
_watches: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # driver -> FanotifyWatch, or None for /proc
_watches_lock = threading.Lock()  # guards _watches: started by the view, refreshed by remounts, stopped on stop


def watch(driver: Driver, clock: Clock = SYSTEM_CLOCK) -> FanotifyWatch | None:
    """Start (once) watching what jobs open beneath ``driver``'s read roots; None means the /proc scan is used.

    Call it when the view starts: fanotify sees only opens that happen after this.  Events are stamped with
    ``clock.monotonic()``."""
    with _watches_lock:
        if driver in _watches:
            return _watches[driver]
        found: FanotifyWatch | None
        try:
            found = watching = FanotifyWatch(driver, clock=clock)
            log.info("files jobs read beneath %s: seen with fanotify on %s", driver.view,
                     ", ".join(watching.marked) or "(nothing mounted yet)")
            weakref.finalize(driver, watching.close)
        except (FanotifyUnavailable, OSError, AttributeError) as exc:
            found = None
            log.warning("files jobs read beneath %s: fanotify unavailable (%s); scanning /proc/<pid>/fd instead "
                        "(other users' files need CAP_SYS_PTRACE)", driver.view, exc)
        _watches[driver] = found
        return found


def rewatch(driver: Driver) -> None:
    """Mark what ``driver`` mounted since its watch started (an overlayfs generation), if it is watched."""
    with _watches_lock:
        found = _watches.get(driver)
    if found is not None:
        found.refresh()


def unwatch(driver: Driver) -> None:
    """Stop watching ``driver``'s view (the view is torn down, or the node stops)."""
    with _watches_lock:
        found = _watches.pop(driver, None)
    if found is not None:
        found.close()


def open_lfns(lfn_of: Callable[[str], str | None], proc: str = "/proc",
              skip_pids: frozenset[int] = frozenset()) -> set[str]:
    """LFNs that some process (other than ``skip_pids``) has open, as ``lfn_of`` maps resolved paths.

    ``lfn_of`` bound to a union driver (``view.lfn_of``) uses that driver's fanotify watch, started on the first
    call if :func:`watch` was not called before; anything else, or fanotify unavailable, scans ``proc``."""
    driver = getattr(lfn_of, "__self__", None)
    if proc == "/proc" and driver is not None and hasattr(driver, "read_roots"):
        found = watch(driver)
        if found is not None:
            return found.open_lfns(lfn_of, skip_pids)
    return scan_proc(lfn_of, proc, skip_pids)

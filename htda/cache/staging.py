"""Staging: one validated copy from a storage backend onto a cache device.

A copy is written under a temporary name that no view shows, checked, and
only then renamed into place:

1. the source is stat'ed (size, mtime) before the copy;
2. bytes stream through one large buffer into the temporary file while a
   checksum runs over them (an interrupted transfer resumes at its offset
   when the backend supports ranges); when the job names peers (cache nodes
   holding a copy, :mod:`htda.cache.peers`) the bytes come from the first
   that serves them, the next one resuming where it stopped, then from
   storage if the job allows it;
3. the copy must have exactly the source's size, and the source must stat
   the same after the copy (else it changed or vanished underneath);
4. the source's own checksum, when the backend offers one, must match the
   streamed one, and so must the checksum a peer recorded with its copy
   when bytes came from it; the copy is read back from the device and must
   match too;
5. ROOT files can be opened with uproot and their keys listed;
6. fsync, mtime set to the source's, meta recorded with the file, the
   source's owner, group and mode given to the file and its directories
   (the temporary is root's alone until then), rename.

Any failure removes the temporary file: nothing partial is ever visible.
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from ..node.clock import SYSTEM_CLOCK, Clock
from .backends.base import CacheDevice, FileStat, StorageBackend, StorageError, TemporaryCopy
from .checksum import Checksum, checksum_fd

if TYPE_CHECKING:
    from .peers import PeerSource

__all__ = ["StagingError", "StagingCancelled", "PeersUnavailable", "StagingJob", "Stager"]

log = logging.getLogger("htda.cache.staging")

T = TypeVar("T")


class StagingError(Exception):
    """A copy failed validation or transfer; ``permanent`` means retrying is pointless for now."""

    def __init__(self, message: str, permanent: bool = False):
        super().__init__(message)
        self.permanent = permanent


class StagingCancelled(StagingError):
    """The copy was cancelled (shutdown, or the file is no longer wanted)."""


class PeersUnavailable(StagingError):
    """No peer could give the copy and storage may not be read for it: try again later (not a fault)."""


@dataclass
class StagingJob:
    """One copy in the queue or in flight; what ``/api/v1/cache/staging`` shows."""

    lfn: str
    storage: StorageBackend
    device: CacheDevice
    score: float = 0.0
    size: int | None = None
    source_url: str | None = None  # None: the node's default storage
    state: str = "queued"  # queued, copying, validating, done, failed, cancelled
    done_bytes: int = 0
    queued_at: float = 0.0  # wall clock; set by whoever queues it (the service, from its clock)
    started_at: float | None = None
    error: str = ""
    cancel: threading.Event = field(default_factory=threading.Event)
    #: cache nodes to copy from, in order, before storage (their bytes are checked against storage's stat)
    peers: list["PeerSource"] = field(default_factory=list)
    #: whether storage may give the bytes when no peer can (False: the copy fails, transiently)
    storage_fallback: bool = True
    #: bytes of the copy in flight by where they came from: a peer's describe() or "storage"
    source_bytes: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"lfn": self.lfn, "state": self.state, "size": self.size, "done_bytes": self.done_bytes,
                "score": self.score, "device": self.device.path, "source": self.storage.describe(),
                "peers": [p.name for p in self.peers], "storage_fallback": self.storage_fallback,
                "queued_at": self.queued_at, "started_at": self.started_at, "error": self.error}

    @property
    def peer_bytes(self) -> int:
        """Bytes of the copy that came from peers."""
        return sum(n for source, n in self.source_bytes.items() if source != "storage")


def _load_sync_file_range() -> Callable[[int, int, int], None]:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.sync_file_range
        fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    except (OSError, AttributeError):
        return lambda fd, offset, length: None
    return lambda fd, offset, length: fn(fd, offset, length, 2)  # SYNC_FILE_RANGE_WRITE: start, do not wait


#: start writing a just-written range to disk, so the final fsync has little left to do (Linux)
start_writeback = _load_sync_file_range()


def _write_all(fd: int, data: memoryview) -> None:
    while data:
        n = os.write(fd, data)
        data = data[n:]


class Stager:
    """Makes validated copies (see the module doc); thread-safe, one call per copy."""

    def __init__(self, checksum: str = "adler32", verify_root: bool = True, readback: bool = True,
                 buffer_size: int = 8 << 20, resume_attempts: int = 2, kernel_copy: bool = True,
                 clock: Clock = SYSTEM_CLOCK):
        """``kernel_copy``: let the backend copy a whole file in the kernel where it can (``copy_to_fd``:
        ``copy_file_range`` between POSIX file systems), checksumming the copy from the page cache; False
        streams every copy through the buffer (``bench/cache_bench.py --stream`` compares the two).
        ``clock`` gives the times a copy records (``started_at``, the meta's ``staged_at``)."""
        Checksum(checksum)  # refuse an unknown kind at start-up, not at the first copy
        self.checksum_kind, self.verify_root, self.readback = checksum, verify_root, readback
        self.buffer_size, self.resume_attempts = buffer_size, resume_attempts
        self.kernel_copy, self.clock = kernel_copy, clock

    def stage(self, job: StagingJob) -> dict[str, Any]:
        """Copy ``job.lfn`` onto ``job.device``; return the meta recorded with the copy."""
        job.state, job.started_at = "copying", self.clock.time()
        before = self._stat(job)
        job.size = before.size
        try:
            tmp = job.device.temporary(before.size)
        except StorageError as exc:
            raise StagingError(str(exc), permanent=True) from None
        except OSError as exc:
            raise StagingError(f"cannot create a temporary file on {job.device.path}: {exc.strerror}") from None
        try:
            return self._copy_validate_commit(job, tmp, before)
        except BaseException:
            tmp.discard()
            raise

    def _copy_validate_commit(self, job: StagingJob, tmp: TemporaryCopy, before: FileStat) -> dict[str, Any]:
        streamed, from_copy = self._transfer(job, tmp, before)
        job.state = "validating"
        os.ftruncate(tmp.fd, job.done_bytes)  # the space was reserved up front
        if job.done_bytes != before.size:
            raise StagingError(f"{job.lfn}: copied {job.done_bytes} bytes, source has {before.size}")
        after = self._stat(job, during=True)
        if not job.storage.same_version(after, before):
            raise StagingError(f"{job.lfn}: source changed during the copy ({before} -> {after})")
        digest = streamed.hexdigest()
        try:
            self._check_peer_checksums(job, digest)
        except StagingError as exc:
            if not job.storage_fallback:
                raise
            # the bytes a peer gave are not its copy's: take the whole file from storage instead (once)
            log.warning("%s; copying it from storage instead", exc)
            job.peers, job.state = [], "copying"
            self._restart(job, tmp, before.size)
            return self._copy_validate_commit(job, tmp, before)
        self._check_source_checksum(job, digest)
        self._flush_and_read_back(job, tmp, digest, needed=self.readback and not from_copy)
        if self.verify_root and job.lfn.endswith(".root"):
            self._check_root(job, tmp.path)
        meta = {"lfn": job.lfn, "size": before.size, "mtime": before.mtime, "checksum": digest,
                "checksum_kind": self.checksum_kind, "source": job.storage.describe(), "source_url": job.source_url,
                "staged_at": self.clock.time()}
        if job.peer_bytes:
            meta["copied_from"] = {k: v for k, v in job.source_bytes.items() if v}
        # the perms as they are now, after the copy: a chmod during it is not missed
        tmp.commit(job.lfn, before.mtime, meta, self._source(job, job.storage.ownership, during=True))
        job.state = "done"
        return meta

    def _flush_and_read_back(self, job: StagingJob, tmp: TemporaryCopy, digest: str, needed: bool) -> None:
        """fsync the copy while it is read back and checksummed (both release the GIL).

        Not needed when the checksum was already taken from the copy (kernel copies).
        """
        flush = threading.Thread(target=os.fsync, args=(tmp.fd,), name="htda-fsync")
        flush.start()
        try:
            if needed and digest and checksum_fd(tmp.fd, self.checksum_kind, self.buffer_size) != digest:
                raise StagingError(f"{job.lfn}: the copy read back from {job.device.path} differs from the source")
        finally:
            flush.join()

    def _stat(self, job: StagingJob, during: bool = False) -> FileStat:
        return self._source(job, job.storage.stat, during)

    def _source(self, job: StagingJob, ask: Callable[[str], T], during: bool) -> T:
        """``ask(lfn)`` of the source (its stat or ownership), its failures as staging errors."""
        try:
            return ask(job.lfn)
        except FileNotFoundError:
            what = "vanished during the copy" if during else "does not exist"
            raise StagingError(f"{job.lfn}: source {what}", permanent=not during) from None
        except StorageError as exc:
            raise StagingError(f"{job.lfn}: {exc}", permanent=not exc.transient) from None

    def _transfer(self, job: StagingJob, tmp: TemporaryCopy, before: FileStat) -> tuple[Checksum, bool]:
        """Copy the bytes; return the running checksum and whether it was taken from the copy itself."""
        ck = Checksum(self.checksum_kind)
        buf = bytearray(self.buffer_size)
        source = "storage"  # where the bytes written now come from (the sinks read it, and ck, at each call)

        def account(length: int) -> None:
            if job.cancel.is_set():
                raise StagingCancelled(f"{job.lfn}: cancelled")
            if job.done_bytes + length > before.size:
                raise StagingError(f"{job.lfn}: source grew during the copy")

        def advanced(length: int) -> None:
            start_writeback(tmp.fd, job.done_bytes, length)
            job.done_bytes += length
            job.source_bytes[source] = job.source_bytes.get(source, 0) + length

        def sink(chunk: memoryview) -> None:
            account(len(chunk))
            _write_all(tmp.fd, chunk)
            ck.update(chunk)
            advanced(len(chunk))

        def copied(position: int, length: int) -> None:
            # the kernel copied this range; checksum it from the copy (still in the page cache)
            account(length)
            view = memoryview(buf)[:length]
            got = os.preadv(tmp.fd, [view], position)
            ck.update(view[:got])
            advanced(length)

        for peer in job.peers:
            source = peer.describe()
            if self._read_peer(job, peer, sink, before):
                return ck, False
        if job.peers:
            if not job.storage_fallback:
                raise PeersUnavailable(f"{job.lfn}: no peer could give the copy ({job.error}); storage may not "
                                       f"be read for it")
            if job.done_bytes and not job.storage.supports_ranges:
                # storage cannot start where the peers stopped: start again, cleanly
                log.info("copying %s again from storage: %s cannot resume at byte %d", job.lfn,
                         job.storage.describe(), job.done_bytes)
                ck = Checksum(self.checksum_kind)
                self._restart(job, tmp, before.size)
            os.lseek(tmp.fd, job.done_bytes, os.SEEK_SET)
            job.error = ""
            source = "storage"
        attempts = 0
        while True:
            try:
                if job.done_bytes == 0 and self.kernel_copy:
                    copied_bytes = job.storage.copy_to_fd(job.lfn, tmp.fd, copied, chunk=self.buffer_size)
                    if copied_bytes is not None:
                        return ck, True
                job.storage.read(job.lfn, sink, offset=job.done_bytes, buffer_size=self.buffer_size)
                return ck, False
            except FileNotFoundError:
                raise StagingError(f"{job.lfn}: source vanished during the copy") from None
            except OSError as exc:
                raise self._write_error(job, exc) from None
            except StorageError as exc:
                attempts += 1
                can_resume = job.storage.supports_ranges and job.done_bytes > 0
                if not exc.transient or not can_resume or attempts > self.resume_attempts:
                    raise StagingError(f"{job.lfn}: {exc}", permanent=not exc.transient) from None
                log.info("resuming %s at byte %d after: %s", job.lfn, job.done_bytes, exc)

    def _read_peer(self, job: StagingJob, peer: "PeerSource", sink: Callable[[memoryview], None],
                   before: FileStat) -> bool:
        """Copy from ``peer`` from ``job.done_bytes`` on; True once the copy has all its bytes.  A peer that
        fails leaves what it gave (whole ranges only) for the next source; its error goes to ``job.error``."""
        start = job.done_bytes
        try:
            peer.read(job.lfn, sink, offset=start, buffer_size=self.buffer_size, expect=before)
        except StorageError as exc:
            job.error = str(exc)
            log.info("copy of %s from %s stopped at byte %d of %d: %s", job.lfn, peer.describe(), job.done_bytes,
                     before.size, exc)
            return False
        except OSError as exc:
            raise self._write_error(job, exc) from None
        if job.done_bytes != before.size:
            job.error = f"peer {peer.name} gave bytes {start}-{job.done_bytes} of {before.size}"
            return False
        return True

    def _write_error(self, job: StagingJob, exc: OSError) -> StagingError:
        if exc.errno == 28:  # ENOSPC
            return StagingError(f"{job.lfn}: {job.device.path} is full", permanent=True)
        return StagingError(f"{job.lfn}: {exc}")

    def _restart(self, job: StagingJob, tmp: TemporaryCopy, size: int) -> None:
        """Empty the temporary file for a copy from the start (its space reserved again where possible)."""
        os.ftruncate(tmp.fd, 0)
        os.lseek(tmp.fd, 0, os.SEEK_SET)
        if size:
            try:
                os.posix_fallocate(tmp.fd, 0, size)
            except OSError:
                pass  # a full device shows at the first write
        job.done_bytes = 0
        job.source_bytes.clear()

    def _check_peer_checksums(self, job: StagingJob, digest: str) -> None:
        """The checksum each peer that gave bytes of this copy recorded with its own copy, where the kinds match,
        must be the streamed one: a peer's copy that rotted, or bytes changed on the way, are refused here
        (the caller then copies from storage, where the job allows it)."""
        if not digest:
            return
        for peer in job.peers:
            theirs = peer.checksum
            if not job.source_bytes.get(peer.describe()) or theirs is None or theirs.kind != self.checksum_kind:
                continue
            if theirs.digest.lstrip("0") != digest.lstrip("0"):
                raise StagingError(f"{job.lfn}: checksum {digest} of the bytes copied differs from the {theirs.digest} "
                                   f"peer {peer.name} recorded with its copy")

    def _check_source_checksum(self, job: StagingJob, digest: str) -> None:
        if not digest:
            return
        theirs = job.storage.checksum(job.lfn, self.checksum_kind)
        if theirs is not None and theirs.lstrip("0") != digest.lstrip("0"):
            raise StagingError(f"{job.lfn}: checksum {digest} differs from the source's {theirs}")

    def _check_root(self, job: StagingJob, path: str) -> None:
        import uproot  # imported here: only ROOT files need it, and it is slow to import

        try:
            with uproot.open(path) as fh:
                keys = fh.keys(cycle=False)
                if not keys:
                    raise ValueError("it has no keys")
                for key in keys[:16]:  # reads each object's header (a TTree's metadata), not its data
                    fh[key]
        except Exception as exc:  # noqa: BLE001 - any uproot failure means a broken ROOT file
            raise StagingError(f"{job.lfn}: not a readable ROOT file: {exc}") from None

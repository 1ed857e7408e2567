"""Copies from peers: a cache node copies a file from another node's copy instead of from storage.

The coordinator names, per assigned file, the pool members that hold it
(``peers``) and whether storage may be read at all for this copy
(``peers_only``).  The holder serves byte ranges of a copy it holds on
``GET /api/v1/cache/copies/{lfn}`` (signed pool members only, see
:func:`serve_range`); the copier reads them with :class:`PeerSource`, which
the stager uses like a storage backend's ``read``.

Storage still defines what is correct: the stager stats the source before
and after, takes its checksum when it offers one, its owner and mode, and
validates ROOT files as for any copy.  The peer's answers must also name
the same size and modification time as storage's stat (a copy staged before
the source changed is refused), and its recorded checksum must match the
bytes received when the kinds agree.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from ..node.client import Client, ClientError
from ..node.rest import HTTPError, Response
from ..protocol.cache import COPIES
from .backends.base import FileStat, Sink, StorageError
from .index import Entry

__all__ = ["MAX_RANGE", "PeerSource", "serve_range", "parse_range", "copy_url"]

#: the most bytes one answer of the copies route carries (a larger range is cut to it; ask for the rest)
MAX_RANGE = 16 << 20
#: the range a copying node asks for: each is held whole in memory on both ends (the answer's bytes, curl's buffer),
#: and with 8 MiB ranges the cluster bench's cache nodes peaked at 231 MB
PEER_CHUNK = 2 << 20

#: answer headers of the copies route: the copy's total size, its source's mtime, its recorded checksum
SIZE_HEADER, MTIME_HEADER = "X-HTDA-Size", "X-HTDA-Mtime"
CHECKSUM_HEADER, CHECKSUM_KIND_HEADER = "X-HTDA-Checksum", "X-HTDA-Checksum-Kind"

_RANGE = re.compile(r"bytes=(\d{0,19})-(\d{0,19})")


def copy_url(base_url: str, lfn: str) -> str:
    """The URL of the copies route for ``lfn`` (a normalized LFN, leading '/') at the node ``base_url``."""
    return COPIES.url(base_url, lfn=lfn)


def parse_range(header: str, size: int) -> tuple[int, int] | None:
    """``(first, last)`` byte of a single ``bytes=a-b``, ``bytes=a-`` or ``bytes=-n`` range, cut to
    :data:`MAX_RANGE` bytes and to the file; None for no header; :class:`HTTPError` 416 for anything else."""
    if not header:
        return None
    m = _RANGE.fullmatch(header.replace(" ", ""))
    if m is None or (not m.group(1) and not m.group(2)):
        raise _unsatisfiable(size, f"unsupported Range {header[:80]!r}: give one bytes=first-last range")
    if not m.group(1):  # the last n bytes
        first, last = max(0, size - int(m.group(2))), size - 1
    else:
        first = int(m.group(1))
        last = int(m.group(2)) if m.group(2) else size - 1
    if first >= size or last < first:
        raise _unsatisfiable(size, f"range {header[:80]!r} is outside the copy's {size} bytes")
    return first, min(last, size - 1, first + MAX_RANGE - 1)


def _unsatisfiable(size: int, message: str) -> HTTPError:
    return HTTPError(416, message, size=size)


def serve_range(entry: Entry | None, lfn: str, range_header: str) -> Response:
    """The answer of the copies route for a copy this node holds (``entry``; None: not held).

    The copy is opened through the device's confined open (no link followed, nothing outside its root) and
    must still have the size and mtime the index recorded, else it is as good as not held (404)."""
    if entry is None:
        raise HTTPError(404, f"{lfn}: no complete copy held here")
    try:
        fd = entry.device.open(lfn)
    except OSError:  # gone, a link planted in its place, a directory: not a copy to serve
        raise HTTPError(404, f"{lfn}: no complete copy held here") from None
    try:
        st = os.fstat(fd)
        if not FileStat(st.st_size, st.st_mtime_ns / 1e9).same_as(FileStat(entry.size, entry.mtime),
                                                                   mtime_slack=1e-6):
            raise HTTPError(404, f"{lfn}: the copy here no longer matches its record")
        size = entry.size
        span = parse_range(range_header, size)
        if span is None:
            if size > MAX_RANGE:
                raise _unsatisfiable(size, f"the copy has {size} bytes: ask for ranges of at most {MAX_RANGE}")
            first, last, status = 0, size - 1, 200
        else:
            (first, last), status = span, 206
        body = _pread_all(fd, first, last - first + 1) if size else b""
    finally:
        os.close(fd)
    if len(body) != last - first + 1 and size:
        raise HTTPError(404, f"{lfn}: the copy here is shorter than its record")
    headers = [(SIZE_HEADER, str(size)), (MTIME_HEADER, repr(entry.mtime)),
               (CHECKSUM_KIND_HEADER, entry.checksum_kind), (CHECKSUM_HEADER, entry.checksum),
               ("Accept-Ranges", "bytes")]
    if status == 206:
        headers.append(("Content-Range", f"bytes {first}-{last}/{size}"))
    return Response(body, status=status, content_type="application/octet-stream", headers=headers)


def _pread_all(fd: int, offset: int, length: int) -> bytes:
    parts, done = [], 0
    while done < length:
        chunk = os.pread(fd, length - done, offset + done)
        if not chunk:
            break
        parts.append(chunk)
        done += len(chunk)
    return b"".join(parts)


@dataclass
class PeerChecksum:
    kind: str
    digest: str


class PeerSource:
    """Reads a file from a peer cache node's copy in ranges, like :meth:`StorageBackend.read`.

    Every failure (peer unreachable, not holding the file, a short or inconsistent answer, a copy of another
    version than ``expect``) is a transient :class:`StorageError`: the next peer or storage may serve it.
    """

    supports_ranges = True

    def __init__(self, name: str, url: str, client: Client, chunk: int = 8 << 20, timeout: float = 30.0,
                 check_mtime: bool = True):
        self.name, self.url, self.client = name, url.rstrip("/"), client
        # where each node sees storage through a caching proxy of its own, a file's mtime is the time that proxy
        # cached it, which differs from node to node: only the size (and the peer's checksum) can be compared
        self.check_mtime = check_mtime
        self.chunk, self.timeout = max(1, min(chunk, MAX_RANGE)), timeout
        #: the checksum the peer recorded with its copy (from its last answer)
        self.checksum: PeerChecksum | None = None
        #: bytes this source delivered to sinks since it was made
        self.delivered = 0

    def describe(self) -> str:
        return f"peer:{self.name}"

    def read(self, lfn: str, sink: Sink, offset: int = 0, buffer_size: int = 8 << 20,
             expect: FileStat | None = None) -> int:
        """Stream the peer's copy of ``lfn`` from ``offset`` to its end into ``sink``; return the bytes delivered.

        ``expect``: storage's stat of the source; a copy of another size or mtime is refused before a byte
        is delivered.  A range is handed to ``sink`` only once it arrived whole."""
        total = expect.size if expect is not None else None
        position, delivered = offset, 0
        while total is None or position < total:
            last = position + self.chunk - 1 if total is None else min(total - 1, position + self.chunk - 1)
            status, headers, body = self._get(lfn, position, last)
            size = self._check_answer(lfn, status, headers, body, position, last, expect)
            total = size
            if position >= size:
                break
            sink(memoryview(body))
            position += len(body)
            delivered += len(body)
            self.delivered += len(body)
        return delivered

    def _get(self, lfn: str, first: int, last: int) -> tuple[int, dict[str, str], bytes]:
        url = copy_url(self.url, lfn)
        try:
            return self.client.fetch(url, [f"Range: bytes={first}-{last}"], timeout=self.timeout,
                                     max_bytes=MAX_RANGE + 1)
        except ClientError as exc:
            raise StorageError(f"peer {self.name}: {exc}", transient=True) from None

    def _check_answer(self, lfn: str, status: int, headers: dict[str, str], body: bytes, first: int, last: int,
                      expect: FileStat | None) -> int:
        """The copy's size if the answer is a good one for bytes ``first``-``last``, else StorageError."""
        def refuse(why: str) -> StorageError:
            return StorageError(f"peer {self.name}: {lfn}: {why}", transient=True)

        if status == 416 and expect is None:
            return first  # asked past the end of a file whose size we did not know: nothing left
        if status not in (200, 206):
            raise refuse(f"HTTP {status}: {body[:200].decode('utf-8', 'replace')}")
        try:
            size, mtime = int(headers[SIZE_HEADER.lower()]), float(headers[MTIME_HEADER.lower()])
        except (KeyError, ValueError):
            raise refuse("the answer names no size or mtime of the copy") from None
        if expect is not None and (size != expect.size or
                                   self.check_mtime and not FileStat(size, mtime).same_as(expect, mtime_slack=1e-6)):
            raise refuse(f"its copy ({size} bytes, mtime {mtime}) is not of the source's version "
                         f"({expect.size} bytes, mtime {expect.mtime})")
        want_last = min(last, size - 1)
        if status == 206:
            got = headers.get("content-range", "")
            if got != f"bytes {first}-{want_last}/{size}":
                raise refuse(f"asked for bytes {first}-{want_last}, got {got!r}")
        elif first != 0 or want_last != size - 1:
            raise refuse("a whole file answered to a range")
        if len(body) != want_last - first + 1:
            raise refuse(f"short answer: {len(body)} of {want_last - first + 1} bytes")
        kind, digest = headers.get(CHECKSUM_KIND_HEADER.lower(), ""), headers.get(CHECKSUM_HEADER.lower(), "")
        self.checksum = PeerChecksum(kind, digest) if kind and digest else None
        return size


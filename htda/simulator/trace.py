"""Access traces: the CSV format, a streaming reader and writer, and the in-memory chunk type.

A trace is a sequence of requests ``timestamp,object_id,size_bytes[,group_id]``
(one CSV row each; a header row may name these columns in another order, or
leave out all but ``object_id``: :class:`Columns`), as
plain UTF-8 text or compressed with gzip, bzip2, xz or zstd (:func:`open_trace`:
public traces are shipped compressed, and a trace of billions of requests is
not decompressed to disk first).  libCacheSim's binary *oracleGeneral* and
*vscsi* traces are read too (:mod:`.binary`; :func:`trace_reader` picks the
reader by the name).  A trace is read in chunks of numpy arrays so that one of any length replays in
bounded memory: only the tables of distinct object and group names grow, never
a list of requests.

Object and group names are *interned* to small integers, the only identity the
replay loops see.  An object whose size changes is a new version of it and
gets a new id (HEP files are immutable; a changed size means a new file).
"""

from __future__ import annotations

import bz2
import csv
import gzip
import io
import lzma
import math
import os
import sys
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Iterable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import BinaryIO, Generic, NamedTuple, TypeVar, cast

import numpy as np
import zstandard

from ..units import MAX_BYTES
from . import DEFAULT_CHUNK, TRACE_FORMATS, TraceError
from .csv_layout import COLUMNS, Columns, columns_and_rows, date_time_seconds, header_hint

__all__ = ["Chunk", "DEFAULT_READING", "Reading", "TraceReader", "CsvTraceReader", "FirstPass", "Interner",
           "Recording", "TraceError", "is_vscsi",
           "first_timestamp", "count_lines", "is_stream", "open_trace", "open_trace_bytes", "trace_name", "STDIN",
           "footprint_and_objects", "footprint_and_replay", "footprint_bytes", "record_sizes", "write_csv",
           "NO_GROUP", "COLUMNS", "Columns", "CSV_SUFFIXES", "TRACE_PATTERNS", "decoding", "is_trace_file",
           "is_oracle_general", "trace_reader", "count_requests", "TRACE_FORMATS", "looks_finer_than_seconds"]

#: group id of a request without a group (the object is its own group)
NO_GROUP = -1


#: leading bytes of the compressed formats a trace may come in, and how to read each from the file's stream
_COMPRESSED: dict[bytes, Callable[[io.BufferedReader], io.BufferedIOBase]] = {
    b"\x1f\x8b": lambda raw: gzip.GzipFile(fileobj=raw, mode="rb"),
    b"BZh": lambda raw: bz2.BZ2File(raw),
    b"\xfd7zXZ\x00": lambda raw: lzma.LZMAFile(raw),
    b"\x28\xb5\x2f\xfd": lambda raw: io.BufferedReader(_ZstdFrames(raw), buffer_size=1 << 20),
}
# a zstd stream may start with a skippable frame (pzstd's, which says how long the next frame is): magic 0x184D2A5?
_COMPRESSED.update({bytes([0x50 + low]) + b"\x2a\x4d\x18": _COMPRESSED[b"\x28\xb5\x2f\xfd"] for low in range(16)})
_MAGIC_BYTES = 6  # the longest of them (xz's)
#: file name endings of CSV traces
CSV_SUFFIXES = tuple(".csv" + packed for packed in ("", ".gz", ".bz2", ".xz", ".zst"))
#: what marks a libCacheSim oracleGeneral trace's name (:mod:`.binary`; the format has no magic bytes)
_ORACLE_MARK = "oraclegeneral"
#: what marks a vscsi trace's name (:mod:`.binary`)
_VSCSI_MARK = ".vscsi"
#: the files ``--suite`` replays, as messages name them
TRACE_PATTERNS = ("*.csv (plain, .gz, .bz2, .xz or .zst), *.oracleGeneral* and *.vscsi* (libCacheSim's binary "
                  "traces)")
#: the trace's name that reads standard input
STDIN = "-"


def is_stream(path: str | os.PathLike) -> bool:
    """Whether ``path`` can be read only once: standard input (``-``), a pipe, a FIFO, a character device."""
    path = os.fspath(path)
    return path == STDIN or (os.path.exists(path) and not os.path.isfile(path) and not os.path.isdir(path))


class _ZstdFrames(io.RawIOBase):
    """A zstd stream's bytes, frame after frame (pzstd writes several, and so do zstd files put end to end), with an
    error where it ends inside a frame: zstandard's own reader returns what it has and stops, and a truncated trace
    would read as a shorter one."""

    def __init__(self, raw: io.BufferedIOBase):
        self._raw = raw
        self._frame = zstandard.ZstdDecompressor().decompressobj()
        self._fed = False  # the current frame has had input
        self._out = memoryview(b"")  # decompressed, not read yet

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while not self._out:
            block = self._raw.read(1 << 20)
            if not block:
                if self._fed:
                    raise zstandard.ZstdError("the data ends inside a zstd frame")
                return 0
            self._out = memoryview(self._decompress(block))
        n = min(len(buffer), len(self._out))
        buffer[:n], self._out = self._out[:n], self._out[n:]
        return n

    def _decompress(self, block: bytes) -> bytes:
        out = []
        while block:
            out.append(self._frame.decompress(block))
            self._fed = True
            if not self._frame.eof:
                break
            block = self._frame.unused_data  # the next frame starts in this block
            self._frame, self._fed = zstandard.ZstdDecompressor().decompressobj(), False
        return b"".join(out)


@contextmanager
def open_trace_bytes(path: str | os.PathLike) -> Iterator[io.BufferedIOBase]:
    """A trace's bytes, decompressed if they are gzip, bzip2, xz or zstd (told by their first bytes, not the name,
    so that a pipe is read as a file is); ``-`` is standard input."""
    path = os.fspath(path)
    with ExitStack() as stack:
        raw = stack.enter_context(os.fdopen(os.dup(sys.stdin.fileno()), "rb") if path == STDIN else open(path, "rb"))
        magic = raw.peek(_MAGIC_BYTES)[:_MAGIC_BYTES]  # looked at, not consumed: a pipe is read once
        opener = next((open_ for prefix, open_ in _COMPRESSED.items() if magic.startswith(prefix)), None)
        yield stack.enter_context(opener(raw)) if opener else raw


@contextmanager
def open_trace(path: str | os.PathLike) -> Iterator[io.TextIOWrapper]:
    """A trace as text, for the csv module.

    utf-8-sig: a trace saved by a spreadsheet starts with a byte-order mark, which is not data."""
    with open_trace_bytes(path) as raw:
        text = io.TextIOWrapper(cast(BinaryIO, raw), encoding="utf-8-sig", newline="")
        try:
            yield text
        finally:
            text.detach()  # raw is open_trace_bytes' to close (for ``-``, a copy of standard input's descriptor)


def trace_name(path: str | os.PathLike) -> str:
    """A trace's name without its suffix (``p3`` for ``p3.csv.gz``, ``w106`` for ``w106.oracleGeneral.bin.zst``)."""
    base = os.path.basename(os.fspath(path))
    if is_oracle_general(base):
        return base[: base.lower().index(_ORACLE_MARK)].rstrip("._-") or base
    if is_vscsi(base):
        return base[: base.lower().index(_VSCSI_MARK)] or base
    for suffix in sorted(CSV_SUFFIXES, key=len, reverse=True):
        if base.endswith(suffix):
            return base[: -len(suffix)]
    return os.path.splitext(base)[0]


@contextmanager
def decoding(path: str) -> Iterator[None]:
    """Undecodable bytes and broken compressed streams reported as a :class:`TraceError` naming ``path``."""
    try:
        yield
    except UnicodeDecodeError as exc:
        raise TraceError(f"{path}: not UTF-8 text (byte {exc.start} of a block cannot be decoded): a trace is a "
                         f"CSV file, plain or compressed with gzip, bzip2, xz or zstd, or a libCacheSim "
                         f"oracleGeneral or vscsi trace (named *.oracleGeneral* or *.vscsi*, or read with --format "
                         f"oracleGeneral or vscsi)") from None
    except (EOFError, gzip.BadGzipFile, lzma.LZMAError, zstandard.ZstdError, OSError) as exc:
        if isinstance(exc, OSError) and exc.errno is not None:  # a real I/O error (bz2 reports bad data without one)
            raise
        raise TraceError(f"{path}: its compressed data ends early or is corrupt ({exc or type(exc).__name__})") \
            from None


def is_oracle_general(path: str | os.PathLike) -> bool:
    """Whether ``path`` names a libCacheSim oracleGeneral trace (told by the name: the format has no magic bytes), as
    libCacheSim tells it (``detect_trace_type``): ``w106.oracleGeneral.bin.zst``, ``msr_hm_0.oracleGeneral.zst``,
    ``x.oracleGeneral``, not ``x.oracleGeneralOpNS.zst`` (27-byte records with an operation and a namespace)."""
    name = os.path.basename(os.fspath(path)).lower()
    return f"{_ORACLE_MARK}." in name or name.endswith(_ORACLE_MARK) or f"{_ORACLE_MARK}bin" in name


def is_vscsi(path: str | os.PathLike) -> bool:
    """Whether ``path`` names a vscsi trace (``cloudPhysicsIO.vscsi``, ``w01.vscsi.zst``)."""
    return _VSCSI_MARK in os.path.basename(os.fspath(path)).lower()


def is_trace_file(path: Path) -> bool:
    """Whether ``path`` is a file ``--suite`` replays (:data:`TRACE_PATTERNS`)."""
    return (path.name.endswith(CSV_SUFFIXES) or _named_binary(path) is not None) and path.is_file()


def _named_binary(path: str | os.PathLike) -> str | None:
    """The binary format ``path``'s name says (None: a CSV trace)."""
    return "oracleGeneral" if is_oracle_general(path) else "vscsi" if is_vscsi(path) else None


def _binary_format(path: str | os.PathLike, fmt: str) -> str | None:
    """The binary format ``path`` is read in with ``--format fmt`` (None: it is read as a CSV)."""
    if fmt not in TRACE_FORMATS:
        raise ValueError(f"trace format {fmt!r}: give one of {', '.join(TRACE_FORMATS)}")
    if f"{_ORACLE_MARK}opns" in os.path.basename(os.fspath(path)).lower():
        raise TraceError(f"{path}: libCacheSim's oracleGeneralOpNS format (27-byte records with an operation and a "
                         f"namespace) is not read; its oracleGeneral form (24-byte records) is")
    if fmt == "auto":
        return _named_binary(path)
    return None if fmt == "csv" else fmt


@dataclass(frozen=True)
class Reading:
    """How a trace file is read (``htda simulate``'s and ``htda trace info``'s reading options): the seconds in a
    unit of its timestamps (0.001 for milliseconds), whether it is sorted by time in memory first (see
    :class:`TraceReader`), the layout of a CSV trace given beside it (:meth:`Columns.given`; None: the file's own)
    and its format (:data:`TRACE_FORMATS`)."""

    time_unit: float = 1.0
    sort: bool = False
    columns: Columns | None = None
    fmt: str = "auto"

    def in_suite(self, path: str | os.PathLike) -> Reading:
        """How ``--suite`` reads ``path``: its format told by its name, and the layout for its CSV files only."""
        return replace(self, fmt="auto", columns=None if _named_binary(path) else self.columns)


#: timestamps in seconds, in the file's order, its own layout, its format told by its name
DEFAULT_READING = Reading()


def trace_reader(path: str | os.PathLike, reading: Reading = DEFAULT_READING, chunk_size: int = DEFAULT_CHUNK) \
        -> TraceReader:
    """The reader of ``path`` as ``reading`` says: by default a reader of :mod:`.binary` for the names
    :func:`is_oracle_general` and :func:`is_vscsi` know, :class:`CsvTraceReader` for the rest (a pipe has no such
    name: ``fmt="oracleGeneral"`` says it).  A CSV layout for a trace read as binary records is refused (not
    ignored)."""
    binary = _binary_format(path, reading.fmt)
    if binary is not None:
        from .binary import BINARY_READERS

        if reading.columns is not None:
            raise TraceError(f"--columns and --delimiter lay out a CSV trace; {path} is read as libCacheSim's "
                             f"{binary} records (--format csv reads it as a CSV)")
        return BINARY_READERS[binary](path, chunk_size=chunk_size, time_unit=reading.time_unit, sort=reading.sort)
    return CsvTraceReader(path, chunk_size=chunk_size, time_unit=reading.time_unit, sort=reading.sort,
                          columns=reading.columns)


#: what an error about a request out of time order adds
SORT_HINT = "(--sort replays a trace out of time order, sorted in memory)"


def _blocks(path: str | os.PathLike) -> Iterator[bytes]:
    """A trace's decompressed bytes, a few MB at a time."""
    with decoding(os.fspath(path)), open_trace_bytes(path) as fh:
        while block := fh.read(1 << 22):
            yield block


def count_lines(path: str | os.PathLike) -> int:
    """How many lines a trace has (decompressed): the total a progress bar counts towards."""
    return sum(block.count(b"\n") for block in _blocks(path))


def count_requests(path: str | os.PathLike, fmt: str = "auto") -> int:
    """About how many requests a trace in format ``fmt`` has (a CSV's lines, a binary trace's records): a
    progress bar's total."""
    binary = _binary_format(path, fmt)
    if binary is None:
        return count_lines(path)
    from .binary import BINARY_READERS

    total, head = 0, b""
    for block in _blocks(path):
        head, total = head or block, total + len(block)
    return total // BINARY_READERS[binary].record(os.fspath(path), head).itemsize if head else 0


@dataclass
class Chunk:
    """Consecutive requests of a trace as parallel arrays (ids are interned integers)."""

    times: np.ndarray  # float64, seconds
    ids: np.ndarray  # int64 object ids
    sizes: np.ndarray  # int64 bytes
    groups: np.ndarray  # int64 group ids, NO_GROUP when the trace has none

    def __len__(self) -> int:
        return len(self.ids)

    @classmethod
    def from_lists(cls, times: list[float], ids: list[int], sizes: list[int], groups: list[int]) -> Chunk:
        return cls(np.asarray(times, dtype=np.float64), np.asarray(ids, dtype=np.int64),
                   np.asarray(sizes, dtype=np.int64), np.asarray(groups, dtype=np.int64))

    @classmethod
    def joined(cls, chunks: list[Chunk]) -> Chunk:
        """The requests of ``chunks`` one after another, in one chunk (the one itself if there is one)."""
        if len(chunks) == 1:
            return chunks[0]
        return cls(*(np.concatenate([getattr(c, f) for c in chunks]) for f in ("times", "ids", "sizes", "groups")))

    def part(self, start: int, stop: int) -> Chunk:
        """Its requests ``start`` to ``stop`` (views, not copies)."""
        return Chunk(self.times[start:stop], self.ids[start:stop], self.sizes[start:stop], self.groups[start:stop])


Name = TypeVar("Name", bound=Hashable)


class Interner(Generic[Name]):
    """Maps names to dense integer ids, in order of first appearance."""

    def __init__(self) -> None:
        self.ids: dict[Name, int] = {}
        self.names: list[Name] = []

    def __call__(self, name: Name) -> int:
        found = self.ids.get(name)
        if found is None:
            found = self.ids[name] = len(self.names)
            self.names.append(name)
        return found

    def __len__(self) -> int:
        return len(self.names)


class TraceReader(ABC):
    """A trace file read as :class:`Chunk` objects of at most ``chunk_size`` requests, timestamps in seconds
    (``time_unit`` seconds per unit of the file's: 0.001 for milliseconds), as often as asked, except from a pipe.

    A trace must be in time order (a timestamp earlier than the one before is an error naming its line), unless
    ``sort``: the whole file is then read into memory (some 80 bytes a request at its peak, beside the names) and
    replayed in time order, requests of one timestamp in the file's order, as a log several threads wrote must be.

    Every format interns (object id, size) pairs in order of first appearance (a size change is a new object), so
    a trace replays to the same hits in any format.  A format's reader says how its bytes become chunks
    (:meth:`_chunks`) and knows the size of each object id it gave (:meth:`object_sizes`).
    """

    has_groups = False
    #: with ``sort``, called with the requests read so far, a chunk's worth at a time, while the trace is read
    #: whole (no chunk is given before it is): a progress bar's
    sorting: Callable[[int], None] | None = None
    #: a request earlier than the one before it is an error (``htda trace info`` counts them instead)
    checks_order = True

    def __init__(self, path: str | os.PathLike, chunk_size: int = DEFAULT_CHUNK, time_unit: float = 1.0,
                 sort: bool = False):
        if not (math.isfinite(time_unit) and time_unit > 0):
            raise ValueError(f"time unit must be a positive number of seconds, not {time_unit}")
        self.path = os.fspath(path)
        self.chunk_size = chunk_size
        self.sort = sort
        self.time_unit = time_unit  # seconds per unit of the timestamps (the half-lives are in seconds)
        self._once = is_stream(self.path)  # a pipe: a second pass would find it empty
        self._passes = 0

    def __iter__(self) -> Iterator[Chunk]:
        return self.chunks()

    def chunks(self) -> Iterator[Chunk]:
        self._passes += 1
        if self._once and self._passes > 1:
            raise TraceError(f"{self.path}: a pipe is read once, and this run needed to read it again (its first "
                             f"pass could not be kept in the temporary folder: full?); give a file instead")
        with decoding(self.path):
            yield from self._chunks()

    @abstractmethod
    def _chunks(self) -> Iterator[Chunk]:
        """The file's requests, chunk by chunk (:class:`TraceError` for what is not a request)."""

    @abstractmethod
    def object_sizes(self) -> np.ndarray:
        """Size of every interned object id (valid after the trace was read)."""


class CsvTraceReader(TraceReader):
    """A CSV trace (the module's format).  ``groups`` interns group names; ``has_groups`` says whether a row named
    one."""

    def __init__(self, path: str | os.PathLike, chunk_size: int = DEFAULT_CHUNK, time_unit: float = 1.0,
                 sort: bool = False, columns: Columns | None = None):
        super().__init__(path, chunk_size, time_unit, sort)
        self.columns = columns  # given beside the file (None: its header's, or the default)
        self.objects: Interner[tuple[Hashable, int]] = Interner()
        self.groups: Interner[str] = Interner()
        self.has_groups = False

    def object_sizes(self) -> np.ndarray:
        return np.fromiter((size for _, size in self.objects.names), dtype=np.int64, count=len(self.objects))

    def _chunks(self) -> Iterator[Chunk]:
        if self.sort:
            yield from self._sorted_chunks()
        else:
            yield from self._chunks_as_written(self.objects, self.groups, self.checks_order)

    def _chunks_as_written(self, intern_object: Interner[tuple[Hashable, int]], intern_group: Interner[str],
                           in_order: bool = True) -> Iterator[Chunk]:
        """The file's requests in its order, names interned by ``intern_object`` and ``intern_group``; ``in_order``:
        a row earlier than the one before is an error."""
        with open_trace(self.path) as fh:
            rows = self._parse(fh, intern_object, intern_group, in_order)
            first = True
            while True:
                times, ids, sizes, groups = [], [], [], []
                for t, oid, size, gid in rows:
                    times.append(t * self.time_unit)
                    ids.append(oid)
                    sizes.append(size)
                    groups.append(gid)
                    if len(ids) == self.chunk_size:
                        break
                if not ids:
                    if first:
                        raise TraceError(f"{self.path}: no requests (the file is empty or only a header)")
                    return
                first = False
                yield Chunk.from_lists(times, ids, sizes, groups)

    def _sorted_chunks(self) -> Iterator[Chunk]:
        """The whole file in time order (stable), its names interned in that order, as a sorted file's would be."""
        objects: Interner[tuple[Hashable, int]] = Interner()  # in the file's order until renumbered
        groups: Interner[str] = Interner()
        chunks: list[Chunk] = []
        read = 0
        for chunk in self._chunks_as_written(objects, groups, in_order=False):
            chunks.append(chunk)
            read += len(chunk)
            if self.sorting is not None:
                self.sorting(read)
        whole = Chunk.joined(chunks)
        chunks.clear()
        order = np.argsort(whole.times, kind="stable")
        in_time = Chunk(whole.times[order], _reintern(whole.ids[order], objects, self.objects), whole.sizes[order],
                        _reintern(whole.groups[order], groups, self.groups))
        for start in range(0, len(in_time), self.chunk_size):
            yield in_time.part(start, start + self.chunk_size)

    def _parse(self, fh: io.TextIOBase, intern_object: Interner[tuple[Hashable, int]], intern_group: Interner[str],
               in_order: bool = True) -> Iterator[tuple[float, int, int, int]]:
        """Each row's (time, object, size, group), names interned by ``intern_object`` and ``intern_group``;
        ``in_order``: a row earlier than the one before is an error."""
        columns, rows = columns_and_rows(fh, self.path, self.columns)
        fields = self._row_parser(columns)
        last_time, last_row = -math.inf, None
        for number, (line_no, row) in enumerate(rows, 1):
            t, name, size, group = fields(row, line_no, number)
            if t < last_time and in_order:  # as written: a date-time is no clearer as seconds
                at = cast(int, columns.time)  # request numbers never go back
                raise self._error(line_no, f"timestamp {row[at].strip()} is earlier than the previous row's "
                                           f"{cast(list, last_row)[at].strip()} {SORT_HINT}")
            last_time, last_row = t, row
            gid = NO_GROUP
            if group:
                self.has_groups = True
                gid = intern_group(group)
            yield t, intern_object((name, size)), size, gid

    def _row_parser(self, columns: Columns) -> Callable[[list[str], int, int], tuple[float, str, int, str]]:
        """What reads a row of these columns as (time, object name, size, group name), given its line number and
        the request's number (its time when the trace has no timestamps).  A closure over the columns' places:
        this runs for every request."""
        time_at, object_at, size_at, group_at, widths = (columns.time, columns.object, columns.size, columns.group,
                                                         columns.widths)
        error, time_unit = self._error, self.time_unit

        def hint(row: list[str], line_no: int) -> str:  # line 1 of a file without --columns may be a header
            return header_hint(row) if line_no == 1 and not columns.from_outside else ""

        def fields(row: list[str], line_no: int, number: int) -> tuple[float, str, int, str]:
            if len(row) not in widths:
                raise error(line_no, f"expected {columns.layout}, got {len(row)}{hint(row, line_no)}")
            if time_at is None:
                t = float(number)
            else:
                try:
                    t = float(row[time_at])
                except ValueError:  # an ISO 8601 date-time, as a log's (in the trace's unit, as a number is)
                    seconds = date_time_seconds(row[time_at])
                    if seconds is None:
                        raise error(line_no, f"timestamp {row[time_at]!r} is neither a number nor an ISO 8601 "
                                             f"date-time{hint(row, line_no)}") from None
                    t = seconds / time_unit
                if not math.isfinite(t):
                    raise error(line_no, f"timestamp {row[time_at]!r} is not finite")
            name = row[object_at].strip()
            if not name:
                raise error(line_no, "empty object_id")
            if size_at is None:
                size = 1
            else:
                try:
                    size = int(row[size_at])
                except ValueError:
                    raise error(line_no, f"size_bytes {row[size_at]!r} is not an integer") from None
                if not 0 <= size <= MAX_BYTES:
                    raise error(line_no, f"size_bytes {size} is {'negative' if size < 0 else 'too large'}")
            group = row[group_at].strip() if group_at is not None and group_at < len(row) else ""
            return t, name, size, group

        return fields

    def _error(self, line_no: int, message: str) -> TraceError:
        return TraceError(f"{self.path}, line {line_no}: {message}")


def _reintern(ids: np.ndarray, names: Interner[Name], into: Interner[Name]) -> np.ndarray:
    """``ids`` (numbers ``names`` gave; NO_GROUP kept) as ``into`` numbers them, meeting them in this order."""
    unique, first = np.unique(ids[ids != NO_GROUP], return_index=True)
    renumbered = np.full(len(names) + 1, NO_GROUP, dtype=np.int64)  # its last entry: where NO_GROUP (-1) points
    for old in unique[np.argsort(first)].tolist():
        renumbered[old] = into(names.names[old])
    return renumbered[ids]


def looks_finer_than_seconds(timestamp: float) -> bool:
    """Whether a timestamp read as seconds since 1970 is past the year 5000: milliseconds or finer, more likely."""
    return timestamp > 1e11


def first_timestamp(path: str | os.PathLike, columns: Columns | None = None) -> float | None:
    """The first data row's timestamp (None if there is none, it is not a finite number or the file cannot be read
    as a trace: the replay says why): a cheap look at the unit."""
    try:
        with open_trace(path) as fh:
            columns, rows = columns_and_rows(fh, given=columns)
            for _, row in rows:
                if columns.time is None:
                    return None
                first = float(row[columns.time])
                return first if math.isfinite(first) else None
    except (ValueError, OSError, EOFError, lzma.LZMAError, zstandard.ZstdError, IndexError):  # TraceError is one
        return None
    return None


def record_sizes(object_sizes: np.ndarray, chunk: Chunk) -> np.ndarray:
    """``object_sizes`` (per object id, its size; -1 for ids not seen yet) with the (non-empty) ``chunk``'s, grown
    as its ids need."""
    top = int(chunk.ids.max()) + 1
    if top > len(object_sizes):
        grown = np.full(max(top, 2 * len(object_sizes)), -1, dtype=np.int64)
        grown[: len(object_sizes)] = object_sizes
        object_sizes = grown
    object_sizes[chunk.ids] = chunk.sizes
    return object_sizes


def footprint_bytes(chunks: Iterable[Chunk]) -> int:
    """Bytes of the distinct objects requested in ``chunks``: the footprint cache sizes are compared with."""
    return footprint_and_objects(chunks)[0]


def footprint_and_objects(chunks: Iterable[Chunk]) -> tuple[int, int]:
    """The footprint of ``chunks`` (:func:`footprint_bytes`) and how many distinct objects it has."""
    sizes = np.full(0, -1, dtype=np.int64)
    for chunk in chunks:
        if len(chunk):
            sizes = record_sizes(sizes, chunk)
    seen = sizes >= 0
    return int(sizes[seen].sum()), int(np.count_nonzero(seen))


class Recording:
    """Chunks kept in an anonymous temporary file as they pass, so that a second pass over a trace (the replay
    after the footprint pass) reads numpy arrays back instead of parsing the text again (the parse is most of a
    one-policy replay's time).  The file takes 32 bytes a request and is gone when the recording is closed (or
    the process ends).  If it cannot be written (a full disk), recording stops and :attr:`complete` is false:
    the caller reads the trace again."""

    def __init__(self, directory: str | None = None):
        self.complete = False  # every chunk passed and was written
        self._ends: list[int] = []  # where each chunk's bytes end in the file
        self._failed = False
        try:  # unbuffered: a full disk fails the write that meets it, not a later flush
            self._file: io.RawIOBase | None = tempfile.TemporaryFile(prefix="htda-trace-", dir=directory, buffering=0)
        except OSError:  # no room (or no writable temporary directory): nothing is recorded
            self._file, self._failed = None, True

    def record(self, chunks: Iterable[Chunk]) -> Iterator[Chunk]:
        """``chunks``, unchanged, each also written to the file while that works."""
        for chunk in chunks:
            if not self._failed:
                self._keep(chunk)
            yield chunk
        self.complete = not self._failed

    def _keep(self, chunk: Chunk) -> None:
        assert self._file is not None  # (not failed)
        try:
            for column in (chunk.times, chunk.ids, chunk.sizes, chunk.groups):
                np.save(self._file, column, allow_pickle=False)
            self._ends.append(self._file.tell())
        except OSError:
            self._failed = True
            self._file.truncate(0)  # give the space back at once

    def replay(self) -> Iterator[Chunk]:
        """The recorded chunks, in order (only when :attr:`complete`).  Each chunk is read at its own offset
        (``pread``), not from the file's position: replays may run at once, in threads or in processes forked
        from this one (which share that position)."""
        if not self.complete:
            raise RuntimeError("the recording is incomplete (not read to the end, or the disk was full)")
        assert self._file is not None  # (complete)
        fd, start = self._file.fileno(), 0
        for end in self._ends:
            data = io.BytesIO(os.pread(fd, end - start, start))
            start = end
            times, ids, sizes, groups = (np.load(data, allow_pickle=False) for _ in range(4))
            yield Chunk(times, ids, sizes, groups)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()

    def __enter__(self) -> Recording:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class FirstPass(NamedTuple):
    """What :func:`footprint_and_replay` learns from its first pass, and the chunks for the replay."""

    footprint: int  # bytes of the distinct objects
    grouped: bool  # some request has a group
    replay: Callable[[], Iterable[Chunk]]  # the trace's chunks again, as often as asked
    objects: int  # how many distinct objects
    recorded: bool  # replay() reads the recording back (fast), not the trace again

    def for_replay(self) -> Iterable[Chunk] | Callable[[], Iterable[Chunk]]:
        """What :func:`~.engine.replay` takes: the recording, read again by each policy in turn; or, without
        one, the trace's chunks once (read again per policy, it would cost a parse each)."""
        return self.replay if self.recorded else self.replay()


@contextmanager
def footprint_and_replay(chunks: Callable[[], Iterable[Chunk]],
                         reading: Callable[[int], None] | None = None) -> Iterator[FirstPass]:
    """The footprint of the trace ``chunks()`` gives, and whether it has groups, from a first pass
    (``reading(requests so far)`` after each chunk), with its chunks for the replays: as that pass recorded them
    (:class:`Recording`), or ``chunks()`` again if the recording could not be written."""
    with Recording() as recording:
        grouped = False

        def passing() -> Iterator[Chunk]:
            nonlocal grouped
            requests = 0
            for chunk in recording.record(chunks()):
                requests += len(chunk)
                grouped = grouped or bool((chunk.groups != NO_GROUP).any())
                if reading is not None:
                    reading(requests)
                yield chunk

        footprint, objects = footprint_and_objects(passing())
        yield FirstPass(footprint, grouped, recording.replay if recording.complete else chunks, objects,
                        recording.complete)


def write_csv(path: str | os.PathLike, rows: Iterable[tuple[float, str, int, str | None]],
              header: bool = True) -> int:
    """Write ``(timestamp, object_id, size_bytes, group_id or None)`` rows; return how many."""
    count = 0
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        if header:
            writer.writerow(["timestamp", "object_id", "size_bytes", "group_id"])
        for t, name, size, group in rows:
            writer.writerow([repr(float(t)), name, int(size)] + ([group] if group is not None else []))
            count += 1
    return count

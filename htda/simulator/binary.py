"""libCacheSim's binary traces, *oracleGeneral* and *vscsi*, read as :class:`~.trace.Chunk` objects like the CSV
ones.

Most public cache traces of recent years (the CloudPhysics, MSR, Twitter,
Meta, Wikimedia, Tencent and Alibaba collections of the S3-FIFO and SIEVE
papers) are distributed in the oracleGeneral format, zstd-compressed: a stream of 24-byte
little-endian records, no header::

    uint32 timestamp   (seconds)
    uint64 object id
    uint32 object size (bytes)
    int64  next access (request number, -1: never; written by libCacheSim's converter, not read here)

as ``libCacheSim/traceReader/customizedReader/oracle/oracleGeneralBin.h`` of
https://github.com/1a1a11a/libCacheSim reads it.  The format has no magic
bytes, so a trace is told by its name, as libCacheSim tells it (``w106.oracleGeneral.bin.zst``,
``msr_hm_0.oracleGeneral.zst``; :func:`.trace.is_oracle_general`), compressed or not (told by the first bytes, as
for a CSV trace).

VMware's *vscsi* block traces (the CloudPhysics traces as first published; libCacheSim's
``data/cloudPhysicsIO.vscsi``) are records of 32 bytes (version 1) or 40 (version 2), little-endian, as
``customizedReader/vscsi.h`` reads them: the block number is the object id, the length in bytes its size, and
the timestamp is in microseconds.  The version is in the high byte of each record's ``ver`` field, at another
offset in each layout, and the first two records tell it; the name tells the format (``*.vscsi*``;
:func:`.trace.is_vscsi`).

An object is an (id, size) pair, as in a CSV trace, and ids are interned in
order of first appearance, so that a trace replays to the same hits in any
format.  Requests of size 0 are kept (libCacheSim skips them by default): they
change no byte hit ratio, and a trace's request count stays its record count.
"""

from __future__ import annotations

import math
import os
from abc import abstractmethod
from collections.abc import Iterator
from typing import ClassVar

import numpy as np

from . import DEFAULT_CHUNK
from .trace import NO_GROUP, SORT_HINT, Chunk, TraceError, TraceReader, open_trace_bytes

__all__ = ["RECORD", "VSCSI_RECORDS", "BinaryTraceReader", "OracleGeneralReader", "VscsiReader", "PairInterner",
           "BINARY_READERS"]

#: one request of an oracleGeneral trace
RECORD = np.dtype([("time", "<u4"), ("id", "<u8"), ("size", "<u4"), ("next", "<i8")])
#: one request of a vscsi trace, by version (the fields libCacheSim's vscsi.h names sn, len, nSG, cmd, ver, lbn, ts
#: and rt; time in microseconds)
VSCSI_RECORDS = {
    1: np.dtype([("sn", "<u4"), ("size", "<u4"), ("nsg", "<u4"), ("cmd", "<u2"), ("ver", "<u2"), ("id", "<u8"),
                 ("time", "<u8")]),
    2: np.dtype([("cmd", "<u2"), ("ver", "<u2"), ("sn", "<u4"), ("size", "<u4"), ("nsg", "<u4"), ("id", "<u8"),
                 ("time", "<u8"), ("rt", "<u8")]),
}


class BinaryTraceReader(TraceReader):
    """A trace of fixed-size little-endian records with the fields ``time``, ``id`` and ``size`` (a format's
    :meth:`record`); it has no groups."""

    #: the format's name, as ``--format`` gives it
    FORMAT: ClassVar[str]
    #: units of the format's timestamps in a second (divided by, not multiplied by its inverse: 10.000125 s is
    #: 10000125 / 1e6, where 10000125 * 1e-6 rounds to 10.000124999999999)
    TICKS_PER_SECOND: ClassVar[float] = 1.0

    def __init__(self, path: str | os.PathLike, chunk_size: int = DEFAULT_CHUNK, time_unit: float = 1.0,
                 sort: bool = False):
        super().__init__(path, chunk_size, time_unit, sort)
        self.pairs = PairInterner()

    @classmethod
    @abstractmethod
    def record(cls, path: str, head: bytes) -> np.dtype:
        """The layout of the records of the trace that starts with ``head`` (at least 1 byte; :class:`TraceError`
        where they are not this format's)."""

    def _chunks(self) -> Iterator[Chunk]:
        blocks = self._sorted_blocks() if self.sort else self._blocks()
        last_time = -math.inf
        for done, records in blocks:
            times = records["time"].astype(np.float64) / self.TICKS_PER_SECOND
            if self.checks_order:
                self._check_order(times, last_time, done)
            last_time = float(times[-1])
            yield Chunk(times * self.time_unit, self._intern(records), records["size"].astype(np.int64),
                        np.full(len(records), NO_GROUP, dtype=np.int64))

    def _blocks(self) -> Iterator[tuple[int, np.ndarray]]:
        """(records before it, up to ``chunk_size`` records) for the whole file, in the file's order."""
        done = 0
        with open_trace_bytes(self.path) as fh:
            pending = _read_up_to(fh, 256)  # what tells the layout
            if not pending:
                raise TraceError(f"{self.path}: no requests (the file is empty)")
            layout = self.record(self.path, pending)
            block = self.chunk_size * layout.itemsize
            while data := pending + _read_up_to(fh, max(0, block - len(pending))):
                data, pending = data[:block], data[block:]
                if len(data) % layout.itemsize:
                    raise TraceError(f"{self.path}: ends in a partial record ({len(data) % layout.itemsize} bytes "
                                     f"after record {done + len(data) // layout.itemsize:,}): "
                                     f"{self.FORMAT} records are {layout.itemsize} bytes each")
                records = np.frombuffer(data, dtype=layout)
                yield done, records
                done += len(records)

    def _sorted_blocks(self) -> Iterator[tuple[int, np.ndarray]]:
        """:meth:`_blocks` of the whole file in time order (stable), read into memory first (a record's bytes each)."""
        blocks = []
        for done, block in self._blocks():
            blocks.append(block)
            if self.sorting is not None:
                self.sorting(done + len(block))
        records = np.concatenate(blocks)
        records = records[np.argsort(records["time"], kind="stable")]
        for start in range(0, len(records), self.chunk_size):
            yield start, records[start:start + self.chunk_size]

    def _check_order(self, times: np.ndarray, last_time: float, done: int) -> None:
        earlier = np.flatnonzero(np.diff(times, prepend=last_time) < 0)
        if len(earlier):
            i = int(earlier[0])
            before = last_time if i == 0 else times[i - 1]
            raise TraceError(f"{self.path}, record {done + i + 1:,}: timestamp {times[i]:.15g} is earlier than the "
                             f"previous record's {before:.15g} {SORT_HINT}")

    def _intern(self, records: np.ndarray) -> np.ndarray:
        """The chunk's (id, size) pairs as interned ids, new pairs numbered in order of first appearance."""
        ids, sizes = records["id"], records["size"]
        unique, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
        pair = inverse.reshape(-1).astype(np.int64)  # each request's pair, as an index into firsts
        firsts = first  # where each pair first appears in the chunk
        resized = np.flatnonzero(sizes != sizes[first][pair])
        if len(resized):  # ids met with a second size within the chunk (rare): their later pairs
            later = np.empty(len(resized), dtype=[("id", "<u8"), ("size", "<u4")])
            later["id"], later["size"] = ids[resized], sizes[resized]
            _, later_first, later_inverse = np.unique(later, return_index=True, return_inverse=True)
            pair[resized] = len(unique) + later_inverse.reshape(-1)
            firsts = np.concatenate([first, resized[later_first]])
        order = np.argsort(firsts)  # first appearance: the numbering a CSV of the same trace gets
        rank = np.empty(len(order), dtype=np.int64)
        rank[order] = np.arange(len(order))
        numbers = self.pairs.intern(ids[firsts[order]], sizes[firsts[order]].astype(np.int64))
        return numbers[rank[pair]]

    def object_sizes(self) -> np.ndarray:
        return self.pairs.sizes()


class OracleGeneralReader(BinaryTraceReader):
    """An oracleGeneral trace (this module's first format)."""

    FORMAT = "oracleGeneral"

    @classmethod
    def record(cls, path: str, head: bytes) -> np.dtype:
        return RECORD


class VscsiReader(BinaryTraceReader):
    """A vscsi trace, version 1 or 2 (this module's second format), its timestamps in microseconds."""

    FORMAT = "vscsi"
    TICKS_PER_SECOND = 1e6

    @classmethod
    def record(cls, path: str, head: bytes) -> np.dtype:
        for version in (2, 1):  # as vscsi.h tries them: version 2's records are the larger
            layout = VSCSI_RECORDS[version]
            marks = np.frombuffer(head[: len(head) - len(head) % layout.itemsize][: 2 * layout.itemsize],
                                  dtype=layout)["ver"]
            if len(marks) and all(int(mark) >> 8 == version for mark in marks):
                return layout
        raise TraceError(f"{path}: not a vscsi trace (its first records carry neither version 1's mark nor "
                         f"version 2's)")


#: the binary formats, by ``--format`` name
BINARY_READERS: dict[str, type[BinaryTraceReader]] = {r.FORMAT: r for r in (OracleGeneralReader, VscsiReader)}



class PairInterner:
    """Numbers (id, size) pairs densely in order of first appearance, in arrays: 24 bytes a pair where a dict of
    tuples takes some 240, on traces of hundreds of millions of objects.

    Pairs are found by id in sorted arrays (an id's first size); a pair whose id came first with another size (rare:
    most traces keep an object's size) is kept in a dict beside them.  Each chunk's new ids make a sorted *level*,
    merged with the level before it while that one is at most twice as large: a pair is copied O(log n) times in
    all and a lookup searches O(log n) levels, where inserting every chunk into one array copies the whole of it
    per chunk (quadratic: on a trace of 20 M requests most of the reading time).
    """

    def __init__(self) -> None:
        self._levels: list[_Level] = []  # each level's ids sorted; the later the level, the newer and smaller
        self._resized: dict[tuple[int, int], int] = {}  # (id, size) pairs whose id is in a level with another size
        self._sizes = np.zeros(0, dtype=np.uint32)  # the size of every number so far (may be longer: grown)
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def sizes(self) -> np.ndarray:
        """The size of every pair, by number."""
        return self._sizes[: self._count].astype(np.int64)

    def intern(self, ids: np.ndarray, sizes: np.ndarray) -> np.ndarray:
        """The numbers of distinct pairs (``ids``, ``sizes``), given in order of first appearance."""
        order = np.argsort(ids, kind="stable")  # one sort for the lookups, each id's first pair and the new level
        ascending = ids[order]
        known, first_sizes, numbers = self._find(order, ascending)
        same = known & (first_sizes == sizes)
        first_of_id = np.ones(len(ids), dtype=bool)
        first_of_id[1:] = ascending[1:] != ascending[:-1]  # (stable: an id's pairs stay in their order)
        adds_id = np.zeros(len(ids), dtype=bool)
        adds_id[order[first_of_id]] = True
        adds_id &= ~known  # a new id, at its first pair in the chunk: goes into a level
        # the rest are pairs of a known id with another size or a second size of a new id: the dict's
        elsewhere = np.flatnonzero(~same & ~adds_id)
        fresh = adds_id.copy()
        for i in elsewhere.tolist():
            number = self._resized.get((int(ids[i]), int(sizes[i])))
            if number is None:
                fresh[i] = True
            else:
                numbers[i] = number
        numbers[fresh] = self._count + np.arange(np.count_nonzero(fresh))
        for i in elsewhere[fresh[elsewhere]].tolist():
            self._resized[(int(ids[i]), int(sizes[i]))] = int(numbers[i])
        new = order[adds_id[order]]  # the new ids' first pairs, by id
        self._remember(_Level(ids[new], sizes[new], numbers[new]))
        self._record_sizes(numbers[fresh], sizes[fresh])
        return numbers

    def _find(self, order: np.ndarray, ascending: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Whether each id is in a level, and if so its first size and its number (each id is in one level), given
        the ids' ascending ``order`` and the ids in it (searched in ascending order, the searches keep to nearby
        memory)."""
        known = np.zeros(len(order), dtype=bool)
        first_sizes = np.full(len(order), -1, dtype=np.int64)
        numbers = np.empty(len(order), dtype=np.int64)
        for level in self._levels:
            at = np.minimum(np.searchsorted(level.ids, ascending), len(level.ids) - 1)
            found = level.ids[at] == ascending
            known[order[found]] = True
            first_sizes[order[found]] = level.sizes[at[found]]
            numbers[order[found]] = level.numbers[at[found]]
        return known, first_sizes, numbers

    def _remember(self, level: _Level) -> None:
        if not len(level.ids):
            return
        while self._levels and len(self._levels[-1].ids) <= 2 * len(level.ids):
            older = self._levels.pop()
            older.absorb(level)
            level = older
        self._levels.append(level)

    def _record_sizes(self, numbers: np.ndarray, sizes: np.ndarray) -> None:
        self._count += len(numbers)
        if self._count > len(self._sizes):
            grown = np.zeros(max(self._count, 2 * len(self._sizes)), dtype=np.uint32)
            grown[: len(self._sizes)] = self._sizes
            self._sizes = grown
        self._sizes[numbers] = sizes


class _Level:
    """Ids sorted, each once, with the size it first came with and its pair's number (aligned arrays)."""

    def __init__(self, ids: np.ndarray, sizes: np.ndarray, numbers: np.ndarray):
        """``ids`` given sorted."""
        self.ids = ids.astype(np.uint64, copy=False)
        self.sizes = sizes.astype(np.uint32)  # the format's sizes are
        self.numbers = numbers.astype(np.int64, copy=False)

    def absorb(self, newer: _Level) -> None:
        """Merges a newer level in, an array at a time: at the peak one array is copied, not the whole level."""
        at = np.searchsorted(self.ids, newer.ids)
        self.ids = np.insert(self.ids, at, newer.ids)
        self.sizes = np.insert(self.sizes, at, newer.sizes)
        self.numbers = np.insert(self.numbers, at, newer.numbers)


def _read_up_to(fh, size: int) -> bytes:
    """``size`` bytes, fewer only at the end (a decompressing stream may return less than asked at any read)."""
    parts, got = [], 0
    while got < size:
        part = fh.read(size - got)
        if not part:
            break
        parts.append(part)
        got += len(part)
    return b"".join(parts)

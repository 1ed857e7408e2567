"""libCacheSim's *oracleGeneral* binary traces, read as :class:`~.trace.Chunk` objects like the CSV ones.

Most public cache traces of recent years (the CloudPhysics, MSR, Twitter,
Meta, Wikimedia, Tencent and Alibaba collections of the S3-FIFO and SIEVE
papers) are distributed in this format, zstd-compressed: a stream of 24-byte
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

An object is an (id, size) pair, as in a CSV trace, and ids are interned in
order of first appearance, so that a trace replays to the same hits in either
format.  Requests of size 0 are kept (libCacheSim skips them by default): they
change no byte hit ratio, and a trace's request count stays its record count.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator

import numpy as np

from . import DEFAULT_CHUNK
from .trace import NO_GROUP, Chunk, TraceError, TraceReader, open_trace_bytes

__all__ = ["RECORD", "OracleGeneralReader", "PairInterner"]

#: one request of an oracleGeneral trace
RECORD = np.dtype([("time", "<u4"), ("id", "<u8"), ("size", "<u4"), ("next", "<i8")])


class OracleGeneralReader(TraceReader):
    """An oracleGeneral trace (this module's format); it has no groups."""

    def __init__(self, path: str | os.PathLike, chunk_size: int = DEFAULT_CHUNK, time_unit: float = 1.0):
        super().__init__(path, chunk_size, time_unit)
        self.pairs = PairInterner()

    def _chunks(self) -> Iterator[Chunk]:
        block = self.chunk_size * RECORD.itemsize
        done, last_time = 0, -math.inf
        with open_trace_bytes(self.path) as fh:
            while data := _read_up_to(fh, block):
                if len(data) % RECORD.itemsize:
                    raise TraceError(f"{self.path}: ends in a partial record ({len(data) % RECORD.itemsize} bytes "
                                     f"after record {done + len(data) // RECORD.itemsize:,}): an oracleGeneral "
                                     f"trace is 24-byte records")
                records = np.frombuffer(data, dtype=RECORD)
                times = records["time"].astype(np.float64)
                self._check_order(times, last_time, done)
                last_time = float(times[-1])
                sizes = records["size"].astype(np.int64)
                yield Chunk(times * self.time_unit, self._intern(records), sizes,
                            np.full(len(records), NO_GROUP, dtype=np.int64))
                done += len(records)
        if not done:
            raise TraceError(f"{self.path}: no requests (the file is empty)")

    def _check_order(self, times: np.ndarray, last_time: float, done: int) -> None:
        earlier = np.flatnonzero(np.diff(times, prepend=last_time) < 0)
        if len(earlier):
            i = int(earlier[0])
            before = last_time if i == 0 else times[i - 1]
            raise TraceError(f"{self.path}, record {done + i + 1:,}: timestamp {times[i]:.0f} is earlier than the "
                             f"previous record's {before:.0f}")

    def _intern(self, records: np.ndarray) -> np.ndarray:
        """The chunk's (id, size) pairs as interned ids, new pairs numbered in order of first appearance."""
        pairs = np.empty(len(records), dtype=[("id", "<u8"), ("size", "<u4")])
        pairs["id"], pairs["size"] = records["id"], records["size"]
        unique, first, inverse = np.unique(pairs, return_index=True, return_inverse=True)
        order = np.argsort(first, kind="stable")  # first appearance: the numbering a CSV of the same trace gets
        ids = np.empty(len(unique), dtype=np.int64)
        ids[order] = self.pairs.intern(unique["id"][order], unique["size"][order].astype(np.int64))
        return ids[inverse.reshape(-1)]

    def object_sizes(self) -> np.ndarray:
        return self.pairs.sizes()


class PairInterner:
    """Numbers (id, size) pairs densely in order of first appearance, in arrays: some 30 bytes a pair where a dict of
    tuples takes some 240, on traces of hundreds of millions of objects.

    Pairs are found by id in a sorted array (an id's first size); a pair whose id came first with another size (rare:
    most traces keep an object's size) is kept in a dict beside it.  New ids are merged in chunk by chunk.
    """

    def __init__(self) -> None:
        self._ids = np.zeros(0, dtype=np.uint64)  # sorted; each id once, with the size it first came with
        self._first_sizes = np.zeros(0, dtype=np.int64)  # aligned with _ids
        self._numbers = np.zeros(0, dtype=np.int64)  # aligned with _ids
        self._resized: dict[tuple[int, int], int] = {}  # (id, size) pairs whose id is in _ids with another size
        self._sizes = np.zeros(0, dtype=np.int64)  # the size of every number so far (may be longer: grown)
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def sizes(self) -> np.ndarray:
        """The size of every pair, by number."""
        return self._sizes[: self._count].copy()

    def intern(self, ids: np.ndarray, sizes: np.ndarray) -> np.ndarray:
        """The numbers of distinct pairs (``ids``, ``sizes``), given in order of first appearance."""
        at = np.searchsorted(self._ids, ids)
        known = at < len(self._ids)
        known[known] = self._ids[at[known]] == ids[known]
        same = known.copy()
        same[known] = self._first_sizes[at[known]] == sizes[known]
        _, first_of_id = np.unique(ids, return_index=True)
        adds_id = np.zeros(len(ids), dtype=bool)
        adds_id[first_of_id] = True
        adds_id &= ~known  # a new id, at its first pair in the chunk: goes into the sorted arrays
        numbers = np.empty(len(ids), dtype=np.int64)
        numbers[same] = self._numbers[at[same]]
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
        self._remember(ids[adds_id], sizes[adds_id], numbers[adds_id])
        self._record_sizes(numbers[fresh], sizes[fresh])
        return numbers

    def _remember(self, ids: np.ndarray, sizes: np.ndarray, numbers: np.ndarray) -> None:
        if not len(ids):
            return
        order = np.argsort(ids)
        at = np.searchsorted(self._ids, ids[order])
        self._ids = np.insert(self._ids, at, ids[order])
        self._first_sizes = np.insert(self._first_sizes, at, sizes[order])
        self._numbers = np.insert(self._numbers, at, numbers[order])

    def _record_sizes(self, numbers: np.ndarray, sizes: np.ndarray) -> None:
        self._count += len(numbers)
        if self._count > len(self._sizes):
            grown = np.zeros(max(self._count, 2 * len(self._sizes)), dtype=np.int64)
            grown[: len(self._sizes)] = self._sizes
            self._sizes = grown
        self._sizes[numbers] = sizes


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

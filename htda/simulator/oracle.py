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
from collections.abc import Iterator

import numpy as np

from .trace import NO_GROUP, Chunk, TraceError, TraceReader, open_trace_bytes

__all__ = ["RECORD", "OracleGeneralReader"]

#: one request of an oracleGeneral trace
RECORD = np.dtype([("time", "<u4"), ("id", "<u8"), ("size", "<u4"), ("next", "<i8")])


class OracleGeneralReader(TraceReader):
    """An oracleGeneral trace (this module's format); it has no groups."""

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
        intern = self.objects
        interned = [intern(pair) for pair in zip(unique["id"][order].tolist(), unique["size"][order].tolist())]
        ids = np.empty(len(unique), dtype=np.int64)
        ids[order] = interned
        return ids[inverse.reshape(-1)]


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

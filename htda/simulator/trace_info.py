"""``htda trace info``: what a trace holds, read once, before a replay that may take long.

It says what the replay will see (requests, objects as (id, size) pairs, the footprint, groups, the time span)
and what would stop or mislead it, all at once rather than at the first: rows out of time order (``--sort``),
timestamps that look finer than seconds (``--time-unit``).  It also gives the ceiling of every policy: a cache
that never evicts still misses each object's first request.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from .report import human_bytes
from .trace import CsvTraceReader, TraceReader, looks_finer_than_seconds

__all__ = ["TraceInfo", "describe", "render"]

#: timestamps from 1973 to 2096, read as seconds, are shown as dates
_DATES = (1e8, 4e9)


@dataclass(frozen=True)
class TraceInfo:
    """What :func:`describe` read.  Times are in seconds (the reader's unit applied); ``groups`` is None for a trace
    that names none."""

    requests: int
    bytes: int
    objects: int
    footprint_bytes: int
    requested_once: int  # objects requested once only
    object_sizes: tuple[int, int, int]  # the smallest, the median and the largest object, in bytes
    groups: int | None
    first_time: float  # the earliest, wherever it is in the file
    last_time: float  # the latest
    out_of_order: int  # requests earlier than a request before them

    @property
    def hit_ratio_ceiling(self) -> float:
        """A cache that never evicts: every object's first request misses."""
        return 1.0 - self.objects / self.requests if self.requests else 0.0

    @property
    def byte_hit_ratio_ceiling(self) -> float:
        return 1.0 - self.footprint_bytes / self.bytes if self.bytes else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "hit_ratio_ceiling": self.hit_ratio_ceiling,
                "byte_hit_ratio_ceiling": self.byte_hit_ratio_ceiling}


def describe(reader: TraceReader, progress: Callable[[int], None] | None = None) -> TraceInfo:
    """Read ``reader``'s trace once, its order not checked (counted instead); ``progress`` gets the requests read
    so far after each chunk."""
    reader.checks_order = False
    requests = requested = out_of_order = 0
    latest, earliest = -math.inf, math.inf
    counts = np.zeros(0, dtype=np.int64)  # requests per object id (ids are dense, in order of first appearance)
    for chunk in reader.chunks():
        earliest = min(earliest, float(chunk.times.min()))
        before = np.maximum.accumulate(np.concatenate(([latest], chunk.times[:-1])))  # the latest before each
        out_of_order += int(np.count_nonzero(chunk.times < before))
        latest = max(latest, float(chunk.times.max()))
        counts = _counted(counts, chunk.ids)
        requests += len(chunk)
        requested += int(chunk.sizes.sum())
        if progress is not None:
            progress(requests)
    sizes = reader.object_sizes()
    groups = len(reader.groups) if isinstance(reader, CsvTraceReader) and reader.has_groups else None
    spread = (int(sizes.min()), int(np.median(sizes)), int(sizes.max())) if len(sizes) else (0, 0, 0)
    return TraceInfo(requests, requested, len(sizes), int(sizes.sum()), int(np.count_nonzero(counts == 1)), spread,
                     groups, earliest, latest, out_of_order)


def _counted(counts: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """``counts`` (grown by doubling, past the largest id) with one more request of each of ``ids``: work of the
    chunk's length, not of the objects seen so far."""
    seen, times = np.unique(ids, return_counts=True)
    if len(seen) and seen[-1] >= len(counts):
        grown = np.zeros(max(int(seen[-1]) + 1, 2 * len(counts)), dtype=np.int64)
        grown[:len(counts)] = counts
        counts = grown
    counts[seen] += times
    return counts


def render(info: TraceInfo, name: str) -> str:
    """The report ``htda trace info`` prints."""
    lines = [f"{name}: {info.requests:,} requests, {human_bytes(info.bytes)} requested",
             f"objects: {info.objects:,} (an object is an (id, size) pair), footprint "
             f"{human_bytes(info.footprint_bytes)}; {_share(info.requested_once, info.objects)} of them requested "
             f"once; sizes {' / '.join(human_bytes(size) for size in info.object_sizes)} (smallest / median / "
             f"largest)",
             "groups: " + (f"{info.groups:,}" if info.groups is not None
                           else "none (every request is its own group)"),
             f"time: {_span(info.first_time, info.last_time)}"]
    if info.out_of_order:
        lines.append(f"order: {info.out_of_order:,} requests ({_share(info.out_of_order, info.requests)}) are "
                     f"earlier than a request before them: replay with --sort")
    else:
        lines.append("order: in time order")
    if looks_finer_than_seconds(info.first_time):
        lines.append(f"unit: the earliest timestamp, {info.first_time:.6g}, looks like milliseconds or finer since "
                     f"1970 read as seconds: give --time-unit ms (or us, ns)")
    lines.append(f"ceiling: a cache that never evicts hits {info.hit_ratio_ceiling:.4f} of the requests and "
                 f"{info.byte_hit_ratio_ceiling:.4f} of the bytes (each object's first request misses)")
    return "\n".join(lines)


def _share(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f} %" if whole else "-"


def _span(first: float, last: float) -> str:
    length = _duration(last - first)
    if _DATES[0] <= first and last <= _DATES[1]:
        return f"{_date(first)} to {_date(last)} UTC ({length})"
    return f"{_number(first)} to {_number(last)} s ({length})"


def _number(t: float) -> str:
    return f"{t:,.6f}".rstrip("0").rstrip(".")


def _date(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S")


def _duration(seconds: float) -> str:
    for unit, length in (("days", 86400.0), ("h", 3600.0), ("min", 60.0)):
        if seconds >= length:
            return f"{seconds / length:.1f} {unit}"
    return f"{seconds:.3g} s"

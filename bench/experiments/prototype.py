"""What the cache prototypes of ``bench/experiments`` share: a trace replayed through one, byte hit ratio, at
each size given on the command line (``SCRIPT TRACE 1,5,10,20,50``: sizes in % of the trace's footprint)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from typing import Protocol

import numpy as np

from htda.simulator.trace import Chunk, trace_reader


class Prototype(Protocol):
    """A cache that answers each request with whether it was a hit."""

    def request(self, oid: int, size: int) -> bool: ...


class SampledContents:
    """The objects a prototype holds, in a list that eviction candidates are drawn from at random (LHD and LRB
    each evict one of a random sample), with the size each was admitted at and the bytes held."""

    def __init__(self, objects: int):
        self.place = np.full(objects, -1, np.int64)  # index in self.cached, -1 when not held
        self.size = np.zeros(objects, np.int64)
        self.cached: list[int] = []
        self.used = 0

    def holds(self, oid: int) -> bool:
        return bool(self.place[oid] >= 0)

    def add(self, oid: int, size: int) -> None:
        self.place[oid] = len(self.cached)
        self.cached.append(oid)
        self.size[oid] = size
        self.used += size

    def remove(self, oid: int) -> None:
        """``oid`` (held) goes: the last of the list takes its place."""
        at = int(self.place[oid])
        moved = self.cached.pop()
        if at < len(self.cached):
            self.cached[at] = moved
            self.place[moved] = at
        self.place[oid] = -1
        self.used -= int(self.size[oid])


def byte_hit_ratio(chunks: Iterable[Chunk], cache: Prototype) -> float:
    """The share of the requested bytes that ``cache`` hit (0 for a trace of no bytes)."""
    hit = total = 0
    for chunk in chunks:
        for oid, size in zip(chunk.ids.tolist(), chunk.sizes.tolist()):
            total += size
            hit += size if cache.request(oid, size) else 0
    return hit / total if total else 0.0


def main(make: Callable[[int, int], Prototype]) -> None:
    """Print the byte hit ratio of ``make(capacity, objects)`` at each size of ``sys.argv``."""
    path, percents = sys.argv[1], sys.argv[2].split(",")
    reader = trace_reader(path)
    chunks = list(reader)
    sizes = reader.object_sizes()
    footprint = int(sizes.sum())
    for percent in percents:
        capacity = max(1, int(float(percent) / 100 * footprint))
        ratio = byte_hit_ratio(chunks, make(capacity, len(sizes)))
        print(f"{path.rsplit('/', 1)[-1]} {percent} % {ratio:.4f}", flush=True)

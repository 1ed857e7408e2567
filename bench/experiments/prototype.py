"""What the cache prototypes of ``bench/experiments`` share: a trace replayed through one, byte hit ratio, at
each size given on the command line (``SCRIPT TRACE 1,5,10,20,50``: sizes in % of the trace's footprint)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from typing import Protocol

from htda.simulator.trace import Chunk, trace_reader


class Prototype(Protocol):
    """A cache that answers each request with whether it was a hit."""

    def request(self, oid: int, size: int) -> bool: ...


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

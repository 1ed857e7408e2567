"""LIRS as a cache's only rule, on traces of one-block objects: a research prototype, hit ratio (not HTDA's code).

    python bench/experiments/lirs.py TRACE 1,5,10,20,50     # sizes in % of the trace's footprint

S. Jiang, X. Zhang, "LIRS: An Efficient Low Inter-reference Recency Set
Replacement Policy to Improve Buffer Cache Performance", SIGMETRICS'02.
Blocks whose last two accesses were close (low inter-reference recency,
LIR) hold 99 % of the cache; the rest (HIR) pass through a small FIFO
queue.  A HIR block read again while still in the recency stack becomes
LIR, and the least recent LIR block steps down.  The LIRS traces (loops,
scans, two pools) were made for it, and W-TinyLFU is the best of the
suite's five baselines on most of their cells: whether LIRS does better
there is a question about what kind of candidate HTDA lacks
(``docs/simulator-history.rst``, *LIRS on the loop traces*).  Every
object is counted as one block, so the trace's sizes must all be equal.
"""

from __future__ import annotations

import sys
from collections import OrderedDict
from collections.abc import Iterable

from htda.simulator.trace import Chunk, trace_reader

#: the HIR queue's share of the cache (the paper's 1 %), at least one block
HIR_SHARE = 0.01
#: non-resident HIR blocks the stack remembers, in cache-fulls (the paper bounds the stack; LIRS-style caches use 2-3)
STACK_GHOSTS = 2


class LirsCache:
    """A cache of ``capacity`` blocks by LIRS.  The stack (``stack``, most recent last) holds LIR blocks and HIR ones,
    resident or not; ``queue`` the resident HIR blocks, oldest first."""

    def __init__(self, capacity: int):
        self.capacity = max(1, capacity)
        self.hir_room = max(1, int(HIR_SHARE * self.capacity))  # (a cache of one block: a FIFO of one)
        self.lir_room = self.capacity - self.hir_room
        self.stack: OrderedDict[int, None] = OrderedDict()
        self.queue: OrderedDict[int, None] = OrderedDict()
        self.lir: set[int] = set()
        self.resident: set[int] = set()

    def request(self, block: int) -> bool:
        """One request; True on a hit."""
        if block in self.lir:
            self._to_top(block)
            self._prune()
            return True
        if block in self.resident:  # a resident HIR block
            if block in self.stack and self.lir_room:
                self._promote(block)
            else:
                self.stack[block] = None
                self.queue.move_to_end(block)
            return True
        if len(self.resident) >= self.capacity:
            self.resident.discard(self.queue.popitem(last=False)[0])
        self.resident.add(block)
        if len(self.lir) < self.lir_room:
            self.lir.add(block)
            self._to_top(block)
        elif block in self.stack and self.lir_room:  # non-resident HIR still in the stack: a recent reuse
            self.queue[block] = None
            self._promote(block)
        else:
            self.stack[block] = None
            self.queue[block] = None
        self._forget_ghosts()
        return False

    def _to_top(self, block: int) -> None:
        self.stack[block] = None
        self.stack.move_to_end(block)

    def _promote(self, block: int) -> None:
        """A HIR block in the stack becomes LIR; if the LIR blocks are then too many, the bottom one becomes a
        resident HIR block."""
        self.queue.pop(block, None)
        self.lir.add(block)
        self._to_top(block)
        if len(self.lir) > self.lir_room:
            bottom = next(iter(self.stack))
            self.lir.discard(bottom)
            self.stack.pop(bottom)
            self.queue[bottom] = None
        self._prune()

    def _prune(self) -> None:
        """HIR blocks leave the stack's bottom until a LIR block is there."""
        while self.stack:
            bottom = next(iter(self.stack))
            if bottom in self.lir:
                return
            self.stack.pop(bottom)

    def _forget_ghosts(self) -> None:
        if len(self.stack) > (1 + STACK_GHOSTS) * self.capacity:
            for block in list(self.stack):
                if block not in self.lir and block not in self.resident:
                    self.stack.pop(block)
                    if len(self.stack) <= (1 + STACK_GHOSTS) * self.capacity:
                        return


def hit_ratio(chunks: Iterable[Chunk], capacity: int) -> float:
    cache = LirsCache(capacity)
    hits = total = 0
    for chunk in chunks:
        for oid in chunk.ids.tolist():
            total += 1
            hits += cache.request(oid)
    return hits / total


def main() -> None:
    path, percents = sys.argv[1], sys.argv[2].split(",")
    reader = trace_reader(path)
    chunks = list(reader)
    sizes = reader.object_sizes()
    if len(set(sizes.tolist())) > 1:
        sys.exit(f"{path}: objects of several sizes; this prototype counts blocks")
    for percent in percents:
        capacity = max(1, int(float(percent) / 100 * len(sizes)))
        print(f"{path.rsplit('/', 1)[-1]} {percent} % {hit_ratio(chunks, capacity):.4f}", flush=True)


if __name__ == "__main__":
    main()

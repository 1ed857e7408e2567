"""LIRS as a cache's only rule: a research prototype, byte hit ratio (not HTDA's code).

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
(``docs/simulator-history.rst``, *LIRS on the loop traces*).  On traces
with sizes the LIR blocks hold 99 % of the bytes, and a miss that finds
the queue empty steps the least recent LIR block down first; where every
object has one size this is the paper's cache of blocks.
"""

from __future__ import annotations

import sys
from collections import OrderedDict
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench.experiments.prototype import main  # noqa: E402

#: the HIR queue's share of the cache (the paper's 1 %), at least one block
HIR_SHARE = 0.01
#: non-resident HIR blocks the stack remembers, in cache-fulls (the paper bounds the stack; LIRS-style caches use 2-3)
STACK_GHOSTS = 2


class LirsCache:
    """A cache of ``capacity`` bytes by LIRS (blocks of one byte: the paper's cache of blocks).  The stack
    (``stack``, most recent last) holds LIR blocks and HIR ones, resident or not; ``queue`` the resident HIR
    blocks, oldest first.  With sizes, the LIR blocks hold at most ``lir_room`` bytes and the stack remembers
    blocks of (1 + :data:`STACK_GHOSTS`) cache-fulls of bytes."""

    def __init__(self, capacity: int):
        self.capacity = max(1, capacity)
        self.hir_room = max(1, int(HIR_SHARE * self.capacity))  # (a cache of one block: a FIFO of one)
        self.lir_room = self.capacity - self.hir_room
        self.stack: OrderedDict[int, None] = OrderedDict()
        self.queue: OrderedDict[int, None] = OrderedDict()
        self.lir: set[int] = set()
        self.resident: set[int] = set()
        self.size: dict[int, int] = {}
        self.used = self.lir_bytes = self.stack_bytes = 0

    def request(self, block: int, size: int = 1) -> bool:
        """One request; True on a hit.  A block larger than the cache is never held."""
        if block in self.lir:
            self._to_top(block)
            self._prune()
            return True
        if block in self.resident:  # a resident HIR block
            if block in self.stack and self.lir_room:
                self._promote(block)
            else:
                self._to_top(block)
                self.queue.move_to_end(block)
            return True
        if size > self.capacity:
            return False
        if block in self.stack:
            self.stack_bytes += size - self.size[block]
        self.size[block] = size
        while self.used + size > self.capacity:
            if not self.queue:  # (sizes only) the LIR blocks fill it: the least recent steps down
                self._demote_bottom()
            gone = self.queue.popitem(last=False)[0]
            self.resident.discard(gone)
            self.used -= self.size[gone]
        self.resident.add(block)
        self.used += size
        if self.lir_bytes + size <= self.lir_room:
            self.lir.add(block)
            self.lir_bytes += size
            self._to_top(block)
        elif block in self.stack and self.lir_room:  # non-resident HIR still in the stack: a recent reuse
            self.queue[block] = None
            self._promote(block)
        else:
            self._to_top(block)
            self.queue[block] = None
        self._forget_ghosts()
        return False

    def _to_top(self, block: int) -> None:
        if block not in self.stack:
            self.stack_bytes += self.size[block]
        self.stack[block] = None
        self.stack.move_to_end(block)

    def _pop_stack(self, block: int) -> None:
        self.stack.pop(block)
        self.stack_bytes -= self.size[block]

    def _promote(self, block: int) -> None:
        """A HIR block in the stack becomes LIR; while the LIR blocks are then too many, the bottom one becomes a
        resident HIR block."""
        self.queue.pop(block, None)
        self.lir.add(block)
        self.lir_bytes += self.size[block]
        self._to_top(block)
        while self.lir_bytes > self.lir_room:
            self._demote_bottom()
        self._prune()

    def _demote_bottom(self) -> None:
        """The stack's bottom block (LIR: the stack is pruned) becomes a resident HIR block, the queue's newest."""
        bottom = next(iter(self.stack))
        self.lir.discard(bottom)
        self.lir_bytes -= self.size[bottom]
        self._pop_stack(bottom)
        self.queue[bottom] = None
        self._prune()

    def _prune(self) -> None:
        """HIR blocks leave the stack's bottom until a LIR block is there."""
        while self.stack:
            bottom = next(iter(self.stack))
            if bottom in self.lir:
                return
            self._pop_stack(bottom)

    def _forget_ghosts(self) -> None:
        most = (1 + STACK_GHOSTS) * self.capacity
        if self.stack_bytes > most:
            for block in list(self.stack):
                if block not in self.lir and block not in self.resident:
                    self._pop_stack(block)
                    if self.stack_bytes <= most:
                        return


if __name__ == "__main__":
    main(lambda capacity, objects: LirsCache(capacity))

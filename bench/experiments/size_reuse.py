"""How often a request's object is read again, by the request's size: does size say anything about reuse?

    python bench/experiments/size_reuse.py TRACE.csv [TRACE.csv ...]

For each power-of-two class of request sizes: its share of the bytes asked for, the share of its requests whose
object (id and size) is read again later in the trace, and the same for first reads only.  A CSV trace of
``timestamp,object_id,size_bytes``, as ``bench/traces/build.sh`` writes them.  Written for *A first read weighted
by its size* in ``docs/simulator-history.rst``.
"""

from __future__ import annotations

import csv
import math
import sys
from collections import defaultdict


def reuse_by_size(path: str) -> list[tuple[int, float, float, float]]:
    """(class, share of bytes, share read again, share of first reads read again) per size class, smallest first."""
    with open(path, newline="") as fh:
        rows = csv.reader(fh)
        next(rows)
        objects = [(name, int(size)) for _, name, size, *_ in rows]
    again = [False] * len(objects)
    later: set[tuple[str, int]] = set()
    for i in range(len(objects) - 1, -1, -1):
        again[i] = objects[i] in later
        later.add(objects[i])
    # per class: bytes, bytes read again, first-read bytes, first-read bytes read again
    sums: defaultdict[int, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    seen: set[tuple[str, int]] = set()
    for obj, read_again in zip(objects, again):
        size = obj[1]
        counts = sums[int(math.log2(max(size, 1)))]
        counts[0] += size
        counts[1] += size * read_again
        if obj not in seen:
            seen.add(obj)
            counts[2] += size
            counts[3] += size * read_again
    total = sum(c[0] for c in sums.values()) or 1
    return [(k, c[0] / total, c[1] / max(c[0], 1), c[3] / max(c[2], 1)) for k, c in sorted(sums.items())]


def main() -> None:
    for path in sys.argv[1:]:
        print(path)
        for k, share, again, first_again in reuse_by_size(path):
            print(f"  2^{k:<3} bytes {share:6.3f}  read again {again:.3f}  first reads read again {first_again:.3f}")


if __name__ == "__main__":
    main()

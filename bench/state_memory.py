"""Where the coordinator's memory goes: the rating state of a loaded history, structure by structure (issue 18).

Fills a PostgreSQL schema as ``bench/scale.py --part coordinator`` does (COPY), loads a
:class:`~htda.coordinator.core.Coordinator` on it in this process, and prints the bytes of each of its
in-memory structures (deep ``sys.getsizeof``: containers, their keys and values, shared objects counted
once; the adaptive rating's C tables by its ``__sizeof__``) and tracemalloc's total for the load, per file::

    PYTHONPATH=. python bench/state_memory.py --files 200000                   # the coordinator's default rating
    PYTHONPATH=. python bench/state_memory.py --files 200000 --policy lrfu     # a fixed half-life (adaptive = false)
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout: run as a script, bench/ is not installed

from bench.scale_coordinator import load_history  # noqa: E402
from htda.coordinator.adaptive import AdaptiveLRFUPolicy  # noqa: E402
from htda.coordinator.core import Coordinator  # noqa: E402
from htda.coordinator.rating import LRFUPolicy  # noqa: E402
from htda.coordinator.store import Store, with_driver  # noqa: E402


def deep_size(obj: Any, seen: set[int]) -> int:
    """Bytes of ``obj`` and everything it holds that was not counted yet (ids in ``seen``)."""
    if id(obj) in seen:
        return 0
    seen.add(id(obj))
    size = sys.getsizeof(obj)
    if isinstance(obj, np.ndarray):
        return size if obj.base is None else size + obj.nbytes
    if isinstance(obj, dict):
        size += sum(deep_size(k, seen) + deep_size(v, seen) for k, v in obj.items())
    elif isinstance(obj, (list, tuple, set, frozenset)):
        size += sum(deep_size(v, seen) for v in obj)
    elif hasattr(obj, "__dict__") and not isinstance(obj, type):
        size += sum(deep_size(v, seen) for v in vars(obj).values())
    return size


def structures(core: Coordinator) -> dict[str, Any]:
    """The coordinator's per-file and per-group structures, by name."""
    state = core.state
    out = {name: value for name, value in vars(state).items() if name not in ("policy", "admission", "lock")}
    out["policy: keys()"] = state.policy.keys()  # (an adaptive rating's is not in its __dict__)
    out["policy: the rest"] = state.policy  # its attributes, and an adaptive rating's C tables
    if core.admission is not None:
        out["admission"] = core.admission
    out.update({"core.placement": core.placement, "core.lists": core.lists})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=200_000)
    parser.add_argument("--files-per-group", type=int, default=5)
    parser.add_argument("--database", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--policy", choices=("adaptive", "lrfu"), default="adaptive",
                        help="the rating: lrfu-adaptive with its defaults (the coordinator's default), or lrfu at a "
                             "fixed half-life (adaptive = false)")
    args = parser.parse_args()
    schema = f"htda_mem_{os.getpid()}"
    groups, jobs, _ = load_history(args.database, schema, args.files, args.files_per_group)
    try:
        store = Store(args.database, schema, access_on="submit")  # the node's default
        core = Coordinator(store, AdaptiveLRFUPolicy() if args.policy == "adaptive" else LRFUPolicy())
        gc.collect()
        tracemalloc.start()
        started = time.perf_counter()
        core.load()
        seconds = time.perf_counter() - started
        gc.collect()
        traced, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        print(f"{args.files:,} files, {groups:,} groups, {jobs:,} jobs, rating {type(core.state.policy).__name__}; "
              f"load {seconds:.1f} s")
        print(f"tracemalloc after load: {traced / 1e6:.1f} MB ({traced / args.files:.0f} B/file), "
              f"peak {peak / 1e6:.1f} MB")
        seen: set[int] = set()
        total = 0
        for name, value in structures(core).items():
            size = deep_size(value, seen)
            total += size
            if size > 1000:
                print(f"  {name:<24} {size / 1e6:8.1f} MB {size / args.files:7.0f} B/file")
        print(f"  {'total':<24} {total / 1e6:8.1f} MB {total / args.files:7.0f} B/file")
        store.close()
    finally:
        engine = sa.create_engine(with_driver(args.database))
        with engine.begin() as conn:
            conn.execute(sa.text(f'DROP SCHEMA "{schema}" CASCADE'))
        engine.dispose()


if __name__ == "__main__":
    main()

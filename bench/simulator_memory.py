"""Peak memory of ``htda simulate`` on a trace of millions of objects, each read by few requests.

    python bench/simulator_memory.py                          # writes the trace, runs this checkout
    python bench/simulator_memory.py --checkout /tmp/old      # ... and another checkout, side by side
    python bench/simulator_memory.py --configuration 1        # the first configuration only
    python bench/simulator_memory.py --configuration 3        # reading the trace alone
    python bench/simulator_memory.py --configuration 4 --configuration 5 --configuration 6 --configuration 7
                                                              # bytes an object: LRU, HTDA 1d, htda(auto) alone

The trace is oracleGeneral (libCacheSim's binary format): ``--requests``
requests (5 million by default), Zipf object ids with 65 % of the requests
for objects read once, lognormal sizes.  Each configuration runs in a child
process (``htda simulate`` of the checkout, imported from its directory)
and the bench prints the child's peak RSS (from ``wait4``), wall and CPU
time.  The figures are the whole run's: reading the trace, every policy at
every size; the third configuration reads the trace alone.  The fourth
keeps the trace's chunks in memory and replays nothing, the next three
replay one policy at one size of 10 % over those chunks (LRU, HTDA at a
fixed half-life of 1 day, ``htda(auto)``): their peak less the fourth's,
over the objects, is the policy's bytes an object (the last column, when
the fourth ran in the same checkout).  A checkout
given with ``--checkout`` needs its C extensions built (``python setup.py
build_ext --inplace``).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from htda.simulator.binary import RECORD

HERE = Path(__file__).resolve().parent.parent

SIMULATE = "import sys; from htda.cli import main; sys.exit(main())"
COMMON = ["--half-lives", "auto", "--admission", "none", "--no-belady", "--no-bound"]
#: reading alone: every chunk, and the sizes of the objects it numbered, as a replay asks for them
READ = ("import sys; from htda.simulator.trace import trace_reader; reader = trace_reader(sys.argv[1]); "
        "sum(map(len, reader)); reader.object_sizes()")

#: the trace's chunks in memory, then one policy (argv[2]: a baseline, "1d" or "auto"; none: nothing replayed) at 10 %
ONE = ("import sys; from htda.simulator.trace import trace_reader; from htda.simulator.run import RunSpec, simulate; "
       "reader = trace_reader(sys.argv[1]); chunks = list(reader); sizes = reader.object_sizes(); "
       "name = sys.argv[2] if len(sys.argv) > 2 else None; "
       "spec = name and RunSpec(capacities=[int(sizes.sum()) // 10], belady=False, bound=False, objects=len(sizes), "
       "baselines=[] if name in ('1d', 'auto') else [name], "
       "half_lives=[86400.0] if name == '1d' else [0.0] if name == 'auto' else []); "
       "spec and simulate(lambda: chunks, spec)")
#: the configuration whose peak the one-policy ones are measured against
BASE = "the trace's chunks kept, nothing replayed"

#: what a configuration's child runs, given the trace: ``python -c`` and its arguments
CONFIGURATIONS: dict[str, Callable[[Path], list[str]]] = {
    "LRU and htda(auto), 1/10/50 %":
        lambda trace: [SIMULATE, "simulate", str(trace), "--sizes", "1%,10%,50%", "--policies", "lru", *COMMON],
    "every baseline and htda(auto), 1/5/10/20/50 %":
        lambda trace: [SIMULATE, "simulate", str(trace), "--sizes", "1%,5%,10%,20%,50%", *COMMON],
    "reading the trace alone": lambda trace: [READ, str(trace)],
    BASE: lambda trace: [ONE, str(trace)],
    "LRU alone, 10 %": lambda trace: [ONE, str(trace), "lru"],
    "HTDA at 1 day alone, 10 %": lambda trace: [ONE, str(trace), "1d"],
    "htda(auto) alone, 10 %": lambda trace: [ONE, str(trace), "auto"],
}


def write_trace(path: Path, requests: int, seed: int) -> int:
    """Writes the trace; returns its number of objects."""
    rng = np.random.default_rng(seed)
    ids = rng.zipf(1.05, requests).astype(np.uint64)
    once = rng.random(requests) < 0.65
    ids[once] = np.uint64(10**12) + np.arange(np.count_nonzero(once), dtype=np.uint64)
    sizes = (rng.lognormal(9, 1.5, 1 << 24) + 1).astype(np.uint32)  # bytes; median ~8 kB, a long tail
    records = np.zeros(requests, dtype=RECORD)
    records["time"] = np.arange(requests) // 100
    records["id"] = ids
    records["size"] = sizes[ids % np.uint64(len(sizes))]
    records["next"] = -1
    records.tofile(path)
    return len(np.unique(ids))


def run(checkout: Path, arguments: list[str]) -> tuple[int, float, float]:
    """Peak RSS in bytes, wall and CPU seconds of one configuration's child process."""
    command = [sys.executable, "-c", *arguments]
    started = time.perf_counter()
    child = subprocess.Popen(command, cwd=checkout, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"{checkout}: failed ({' '.join(arguments[1:])})")
    return usage.ru_maxrss * 1024, wall, usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=5_000_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--trace", type=Path, help="where to write the trace and leave it (24 bytes a request; "
                                                   "by default a temporary file, removed at the end)")
    parser.add_argument("--checkout", type=Path, action="append", default=[],
                        help="another checkout to measure beside this one (repeatable)")
    parser.add_argument("--configuration", type=int, action="append", choices=range(1, len(CONFIGURATIONS) + 1),
                        help="run only this configuration (1 to 7; repeatable): a checkout that keeps every "
                             "policy's tables needs some 12 GB for the first and more for the second")
    args = parser.parse_args()
    if args.trace and ".oracleGeneral" not in args.trace.name:
        # the reader knows the format by this part of the name; the children would all fail after the writing
        parser.error(f"--trace {args.trace}: the name must contain '.oracleGeneral' (e.g. memory.oracleGeneral.bin)")
    chosen = [list(CONFIGURATIONS.items())[n - 1] for n in args.configuration or range(1, len(CONFIGURATIONS) + 1)]

    with tempfile.TemporaryDirectory() as scratch:
        trace = args.trace or Path(scratch) / "memory.oracleGeneral.bin"
        # written by a fresh interpreter: a child's peak RSS from wait4 counts the RSS of the process it was started
        # from (the memory it shared until exec), and the trace's arrays would be most of a reading's figure
        with multiprocessing.get_context("spawn").Pool(1) as writer:
            objects = writer.apply(write_trace, (trace, args.requests, args.seed))
        print(f"trace {trace}: {args.requests:,} requests, {objects:,} objects (an object is an id and a size)")
        print(f"{'checkout':<32} {'configuration':<48} {'peak RSS':>10} {'wall':>8} {'CPU':>8} {'B/object':>9}")
        for checkout in [HERE, *args.checkout]:
            base = None
            for name, command in chosen:
                rss, wall, cpu = run(checkout, command(trace))
                base = rss if name == BASE else base
                alone = name.endswith(" alone, 10 %") and base is not None
                per_object = f"{(rss - base) / objects:>9.0f}" if alone else ""
                print(f"{str(checkout):<32} {name:<48} {rss / 1e9:>7.2f} GB {wall:>7.1f}s {cpu:>7.1f}s {per_object}",
                      flush=True)


if __name__ == "__main__":
    main()

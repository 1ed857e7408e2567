"""HTDA's replay speed against an earlier commit's, side by side in one process.

    python bench/simulator_ab.py REV TRACE.csv [TRACE.csv ...]     # e.g. REV = HEAD~3, main, a tag
    python bench/simulator_ab.py REV --many-objects 200000          # the simulator bench's trace of many objects
    python bench/simulator_ab.py REV TRACE.csv [TRACE.csv ...] --read   # reading the traces, not replaying them

A machine's speed drifts (by a fifth from one run to the next on the 2-core
development machines), so two builds timed in separate runs cannot tell a
change of 10 %.  This bench checks REV out (a git worktree in a temporary
directory), builds its C extensions there, loads it as a second package
(``htda_base``, its absolute imports rewritten) and replays its
``htda(auto)`` and this checkout's in one replay: at each cache size the two
policies take turns chunk by chunk, so whatever the machine does falls on
both alike.  Each run prints both speeds (requests a second of CPU time over
the sizes), this checkout's over REV's, and whether every size's hits are
the same (a change meant to be faster should not change them).  Both get the
trace's object count when their ``HTDAPolicy`` takes it (``objects``), as
``htda simulate`` gives it, and this checkout's candidate half-lives
(``DEFAULT_HALF_LIVES``): the bench compares code, so a change of the
default candidates shows as the same speed and hits here; compare those
with ``htda simulate --candidates``.

``--read`` times reading each trace instead (``trace_reader``, the whole
file into chunks, CPU time): the two builds take turns, a whole reading
each, and each run says whether both gave the same chunks.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import inspect
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from htda.coordinator.adaptive import AdaptiveLRFUPolicy  # noqa: E402
from htda.simulator.engine import replay  # noqa: E402
from htda.simulator.htda_policy import HTDAPolicy  # noqa: E402
from htda.simulator.run import AUTO_START, DEFAULT_HALF_LIVES  # noqa: E402
from htda.simulator.trace import Chunk, footprint_and_objects, trace_reader  # noqa: E402

SIZES = (0.01, 0.05, 0.10, 0.20, 0.50)
BASE = "htda_base"
_ABSOLUTE = re.compile(r"\b(from|import) htda(?=[.\s])")


@contextmanager
def checkout_as_package(rev: str) -> Iterator[tuple[ModuleType, ModuleType]]:
    """REV's ``htda`` built and imported as :data:`BASE`: its simulator policy module and its adaptive rating's."""
    with tempfile.TemporaryDirectory(prefix="htda-ab-") as tmp:
        tree = Path(tmp) / "tree"
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "--quiet", str(tree), rev], check=True)
        try:
            subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace", "--quiet"], cwd=tree, check=True,
                           stdout=subprocess.DEVNULL)
            package = Path(tmp) / "packages" / BASE
            shutil.copytree(tree / "htda", package)
            for source in package.rglob("*.py"):
                source.write_text(_ABSOLUTE.sub(rf"\1 {BASE}", source.read_text()))
            sys.path.insert(0, str(package.parent))
            try:
                yield (importlib.import_module(f"{BASE}.simulator.htda_policy"),
                       importlib.import_module(f"{BASE}.coordinator.adaptive"))
            finally:
                sys.path.remove(str(package.parent))
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)], check=False)


def _policy(policy_cls, rating_cls, capacity: int, label: str, objects: int):
    rating = rating_cls(half_life=AUTO_START, half_lives=DEFAULT_HALF_LIVES)
    sized = "objects" in inspect.signature(policy_cls).parameters
    policy = policy_cls(capacity, rating, label=label, **({"objects": objects} if sized else {}))
    if not hasattr(policy, "takes_arrays"):  # a build from before the engine handed arrays: it gets lists
        policy.takes_arrays = False
    return policy


def compare(name: str, chunks: list[Chunk], base: tuple[ModuleType, ModuleType], runs: int) -> list[float]:
    """``runs`` side-by-side replays of ``chunks``; prints each, returns this checkout's speed over REV's."""
    footprint, objects = footprint_and_objects(chunks)
    capacities = [max(1, int(f * footprint)) for f in SIZES]
    ratios = []
    for run in range(runs):
        gc.collect()  # an earlier build may leave a replay's tables to the collector
        policies = []
        for capacity in capacities:
            pair = [_policy(HTDAPolicy, AdaptiveLRFUPolicy, capacity, "this", objects),
                    _policy(base[0].HTDAPolicy, base[1].AdaptiveLRFUPolicy, capacity, "base", objects)]
            policies += pair if run % 2 == 0 else pair[::-1]  # who goes first alternates
        result = replay(chunks, policies)
        cpu: dict[str, float] = {}
        hits: dict[str, list[float]] = {}
        for r in result.results:
            cpu[r.label] = cpu.get(r.label, 0.0) + r.cpu_seconds
            hits.setdefault(r.label, []).append(r.hit_bytes)
        speed = {label: result.requests * len(capacities) / seconds for label, seconds in cpu.items()}
        ratios.append(speed["this"] / speed["base"])
        print(f"{name}: run {run + 1}: this {speed['this']:,.0f}, base {speed['base']:,.0f} requests/s of CPU, "
              f"ratio {ratios[-1]:.3f}; hits {'the same' if hits['this'] == hits['base'] else 'DIFFER'}",
              flush=True)
    return ratios


def compare_reading(name: str, path: str, base_trace: ModuleType, runs: int) -> list[float]:
    """``runs`` readings of the trace at ``path`` by each build in turn; prints each, returns this checkout's speed
    over REV's."""
    readers = [("this", trace_reader), ("base", base_trace.trace_reader)]
    ratios = []
    for run in range(runs):
        seconds, chunks = {}, {}
        for label, reader in readers if run % 2 == 0 else readers[::-1]:
            gc.collect()
            start = time.process_time()
            chunks[label] = list(reader(path))
            seconds[label] = time.process_time() - start
        same = len(chunks["this"]) == len(chunks["base"]) and all(
            np.array_equal(getattr(mine, column), getattr(theirs, column))
            for mine, theirs in zip(chunks["this"], chunks["base"]) for column in ("times", "ids", "sizes", "groups"))
        ratios.append(seconds["base"] / seconds["this"])
        requests = sum(map(len, chunks["this"]))
        print(f"{name}: run {run + 1}: this {requests / seconds['this']:,.0f}, base {requests / seconds['base']:,.0f} "
              f"requests read a second of CPU, ratio {ratios[-1]:.3f}; chunks {'the same' if same else 'DIFFER'}",
              flush=True)
    return ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("rev", help="the commit to compare with (anything git rev-parse takes)")
    parser.add_argument("traces", nargs="*", help="CSV traces, as htda simulate reads them")
    parser.add_argument("--many-objects", type=int, metavar="REQUESTS",
                        help="also the simulator bench's generated trace of many objects, of this many requests")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--read", action="store_true", help="time reading the traces, not replaying them")
    args = parser.parse_args()
    if not args.traces and not args.many_objects:
        parser.error("give a trace or --many-objects")
    with checkout_as_package(args.rev) as base:
        all_ratios = []
        for path in args.traces:
            if args.read:
                all_ratios += compare_reading(Path(path).stem, path, importlib.import_module(f"{BASE}.simulator.trace"),
                                              args.runs)
            else:
                all_ratios += compare(Path(path).stem, list(trace_reader(path)), base, args.runs)
        if args.many_objects:
            from simulator_bench import many_objects_trace  # (beside this file)

            all_ratios += compare("many objects", many_objects_trace(args.many_objects, seed=1), base, args.runs)
    print(f"this checkout over {args.rev}: {min(all_ratios):.3f}-{max(all_ratios):.3f} "
          f"(median {sorted(all_ratios)[len(all_ratios) // 2]:.3f}) over {len(all_ratios)} runs")


if __name__ == "__main__":
    main()

"""Simulator benchmark: replay speed per policy, peak memory of a long replay, and HTDA's policy against
LRU, LFU, ARC, S3-FIFO, W-TinyLFU and the PFOO-L bound on the synthetic analysis workload.

    python bench/simulator_bench.py            # quick: 1 M requests for speed and memory, 200 k for the table
    python bench/simulator_bench.py --full     # 10 M requests for speed and memory, 1 M for the table,
                                               # 200 k with the coordinator's placement

The synthetic workload reads files in datasets (a rating per dataset, few
of them); block and object traces have a group per object.  So speed and
memory are also measured on a generated trace of many objects, each its own
group (Zipf popularity over a population that changes in phases, a fifth of
the requests for objects read once): the unfavourable case for HTDA's
per-group state.

Peak RSS is measured in a child process per run so the runs do not inherit
each other's memory.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np

from htda.simulator.generator import AnalysisWorkload
from htda.simulator.report import best_half_lives, sweep_table
from htda.simulator.run import AUTO, RunSpec, simulate
from htda.simulator.trace import NO_GROUP, Chunk, footprint_and_objects

# of the footprint: the synthetic workload supersedes datasets, so over 1M requests its footprint is ~20x the
# bytes live at one time; these sizes span 5-100 % of that live working set, where the policies differ
FRACTIONS = (0.0025, 0.005, 0.01, 0.02, 0.05)


BASELINES = ["lru", "lfu", "arc", "s3fifo", "wtinylfu"]


def footprint(requests: int, seed: int) -> int:
    """Bytes of the distinct files the trace requests: cache sizes are percentages of it, as in ``htda simulate``."""
    return AnalysisWorkload(requests=requests, seed=seed).footprint_bytes()


def child(requests: int, bounds: bool, seed: int) -> dict:
    """One replay at 20 % of the footprint; returns speeds and this process's peak RSS."""
    workload = AnalysisWorkload(requests=requests, seed=seed)
    # auto: the coordinator's default (the adaptive rating, whose speed the goal is on); 5m: one fixed half-life
    spec = RunSpec(capacities=[int(0.2 * footprint(requests, seed))], half_lives=[AUTO, 300.0],
                   baselines=BASELINES, belady=bounds, bound=bounds)
    started = time.perf_counter()
    result = simulate(workload.chunks(), spec)
    wall = time.perf_counter() - started
    return {
        "requests": result.requests, "wall_seconds": wall,
        "requests_per_second": {r.label: result.requests / r.seconds for r in result.results if r.seconds > 0},
        "requests_per_cpu_second": {r.label: result.requests / r.cpu_seconds for r in result.results
                                    if r.cpu_seconds > 0},
        "load_average": os.getloadavg()[0],
        "byte_hit_ratio": {r.label: result.byte_hit_ratio(r) for r in result.results},
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def many_objects_trace(requests: int, seed: int, phases: int = 5, chunk: int = 65536) -> list[Chunk]:
    """``requests`` over ``requests // 2`` objects in ``phases`` phases, each drawing ids from a Zipf(1.1)
    popularity over a fresh permutation of the population; a fifth of the requests are for objects read once.
    Sizes are log-normal (median 22 KB), timestamps the request numbers, no groups."""
    rng = np.random.default_rng(seed)
    population = max(requests // 2, 1)
    ids = np.concatenate([rng.permutation(population)[rng.zipf(1.1, size=part) % population]
                          for part in np.diff(np.linspace(0, requests, phases + 1).astype(np.int64))])
    once = rng.random(requests) < 0.2
    ids[once] = population + np.arange(int(once.sum()))
    sizes = (rng.lognormal(10.0, 1.5, size=population + int(once.sum())).astype(np.int64) + 1)[ids]
    times = np.arange(requests, dtype=np.float64)
    groups = np.full(requests, NO_GROUP, dtype=np.int64)
    return [Chunk(times[at:at + chunk], ids[at:at + chunk], sizes[at:at + chunk], groups[at:at + chunk])
            for at in range(0, requests, chunk)]


def many_objects_child(requests: int, seed: int) -> dict:
    """htda(auto) and LRU at 10 % of the footprint of :func:`many_objects_trace`: speeds and peak RSS."""
    chunks = many_objects_trace(requests, seed)
    footprint, objects = footprint_and_objects(chunks)  # as htda simulate's first pass counts them
    spec = RunSpec(capacities=[int(0.1 * footprint)], half_lives=[AUTO], baselines=["lru"], belady=False,
                   bound=False, objects=objects)
    result = simulate(iter(chunks), spec)
    return {
        "requests": result.requests, "objects": result.objects,
        "requests_per_cpu_second": {r.label: result.requests / r.cpu_seconds for r in result.results
                                    if r.cpu_seconds > 0},
        "byte_hit_ratio": {r.label: result.byte_hit_ratio(r) for r in result.results},
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def run_child(requests: int, bounds: bool, seed: int, many_objects: bool = False) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", str(requests), "--seed", str(seed)]
                         + ([] if bounds else ["--online-only"]) + (["--many-objects"] if many_objects else []),
                         check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def speed_and_memory(requests: int, seed: int) -> None:
    print("== replay speed and memory, synthetic analysis workload, cache = 20 % of the footprint ==")
    small = max(requests // 10, 100_000)
    for n, bounds in ((small, False), (requests, False), (requests, True)):
        data = run_child(n, bounds, seed)
        what = "online policies + Belady + PFOO-L" if bounds else "online policies only"
        print(f"\n{n:,} requests, {what}: wall {data['wall_seconds']:.1f} s "
              f"(incl. generating the trace), peak RSS {data['peak_rss_mb']:.0f} MB, "
              f"load average {data['load_average']:.1f} on {os.cpu_count()} cores")
        print(f"  {'policy':10} {'requests/s (cpu time)':>22} {'requests/s (wall)':>18}")
        for label, rate in data["requests_per_cpu_second"].items():
            print(f"  {label:10} {rate:22,.0f} {data['requests_per_second'][label]:18,.0f}")


def speed_with_many_objects(requests: int, seed: int) -> None:
    print("\n== replay speed and memory, many objects (one group each), cache = 10 % of the footprint ==")
    for n in (requests // 10, requests):
        data = run_child(n, False, seed, many_objects=True)
        rates = data["requests_per_cpu_second"]
        print(f"\n{n:,} requests, {data['objects']:,} objects: peak RSS {data['peak_rss_mb']:.0f} MB "
              f"(the trace in memory: {n * 32 / 2**20:.0f} MB)")
        print(f"  {'policy':10} {'requests/s (cpu time)':>22} {'byte hit ratio':>15}")
        for label, rate in rates.items():
            print(f"  {label:10} {rate:22,.0f} {data['byte_hit_ratio'][label]:15.4f}")


def versus_baselines(requests: int, seed: int) -> None:
    workload = AnalysisWorkload(requests=requests, seed=seed)
    ws = footprint(requests, seed)
    spec = RunSpec(capacities=[int(f * ws) for f in FRACTIONS], half_lives=[AUTO, 300.0, 3600.0, 86400.0],
                   baselines=BASELINES, belady=True, bound=True)
    result = simulate(workload.chunks(), spec)
    print(f"\n== HTDA vs {', '.join(BASELINES)}, {requests:,} requests, footprint {ws / 1e9:.0f} GB ==")
    print(sweep_table(result, byte=True, reference=ws))
    print()
    print(best_half_lives(result, reference=ws))
    ratio = {(r.label, r.capacity): result.byte_hit_ratio(r) for r in result.results}
    for label in ("htda(auto)", "htda(5m)", "htda(1d)"):
        behind = [f"{100 * c / ws:g} %" for c in spec.capacities
                  if ratio[label, c] < max(ratio[b, c] for b in BASELINES)]
        print(f"{label} below the best baseline at: {', '.join(behind) or 'no size'}")


def with_placement(requests: int, seed: int) -> None:
    """HTDA as the pool runs it: the coordinator's placement every 5 minutes, staging whole datasets."""
    workload = AnalysisWorkload(requests=requests, seed=seed)
    ws = footprint(requests, seed)
    spec = RunSpec(capacities=[int(f * ws) for f in FRACTIONS[::2]], half_lives=[300.0], baselines=["lru"],
                   cycle=300.0, belady=False, bound=True)
    result = simulate(workload.chunks(), spec)
    print(f"\n== HTDA with the coordinator's placement every 5 min (1 node), {requests:,} requests ==")
    print(sweep_table(result, byte=True, reference=ws))
    placed = [r for r in result.results if r.label.endswith("placed")]
    speed = sum(result.requests / r.cpu_seconds for r in placed) / len(placed)
    print(f"placed replay speed: {speed:,.0f} requests/s of CPU time "
          f"(one coordinator placement per 5 min of trace time); the demand-fetch bound does not bound it")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--full", action="store_true", help="10 M requests (several minutes)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--online-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--many-objects", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        measured = (many_objects_child(args.child, args.seed) if args.many_objects
                    else child(args.child, not args.online_only, args.seed))
        print(json.dumps(measured))
        return
    speed_and_memory(10_000_000 if args.full else 1_000_000, args.seed)
    speed_with_many_objects(5_000_000 if args.full else 1_000_000, args.seed)
    versus_baselines(1_000_000 if args.full else 200_000, args.seed)
    with_placement(200_000 if args.full else 30_000, args.seed)


if __name__ == "__main__":
    main()

"""Judge the adaptive rating as issue 16 does: the public traces at 1-50 %, over several samples, and the
synthetic analysis workload at every size from 0.25 to 50 %.

    python bench/adaptive_judge.py TRACES_DIR --out DIR        # every trace of it, five samples, kept in DIR
    python bench/adaptive_judge.py TRACES_DIR --out DIR --samples 3 --baselines OTHER_OUT
    python bench/adaptive_judge.py TRACES_DIR --out DIR --samples 1 --hindsight   # and what a perfect choice reaches
    python bench/adaptive_judge.py TRACES_DIR --out NEW --baselines OLD --against OLD   # a change, cell by cell
    python bench/adaptive_judge.py --generated 2 --samples 2 --synthetic-requests 20000   # the quick smoke run

A cell is a (trace, cache size); HTDA's default (``htda(auto)``) is at or
above the best of LRU, LFU, ARC, S3-FIFO and W-TinyLFU in it, or not, and
the gap closed is HTDA's lead over that best baseline summed over the
cells, over the PFOO-L bound's.  One sample of the groups the rating's
shadow caches replay moves a count of cells by about two on the public
traces (``docs/simulator.rst``, *How much a sample changes*), so the
judge replays each trace with ``--sample-seed`` 0 to ``--samples`` - 1
and reports each sample, the cells at or above the best baseline in every
one and in none.  The suite's five sizes hid a loss of the synthetic
workload at 2-4 % (``docs/simulator-history.rst``, the fourth layout), so
the synthetic workload is replayed at ten sizes.

Every replay is ``htda simulate ... --json`` in a child process, ``--jobs``
at a time, with the package of the checkout this file is in (its C
extensions built in place), whatever the current directory; its output is
kept in ``--out`` (a rerun replays only what is missing).  Judge a change by
running each checkout's own copy of this file, each into its own folder.
The replay speed it reports is CPU time, yet replays that share the
machine's cores slow each other (on 2 cores, AdaptSize 396,000 requests a
second two at a time against 459,000 alone, the same build): judge the
speed with ``--jobs 1``.  The machines themselves differ by 2-3 times from
one session to the next, so the speed is also given as a share of LRU's on
the same trace (from the same replay; with ``--baselines``, from theirs).
With ``--hindsight`` each trace is replayed once more with every candidate
of the default alone (``htda simulate --hindsight``, sample 0; about five
times the replay of ``htda(auto)``), and the report adds what a perfect
choice among them would reach, cell by cell, against the default: the
ceiling of any rule of the choice, and the cells below the best baseline
whatever the choice (those need candidates of another kind); and what a
perfect choice among them and the five baselines would reach, the
ceiling of any choice among the policies replayed.
With ``--against OTHER_OUT`` (another build's folder) the report ends with
the cells where HTDA's sample 0 moved since, the most lost first, and
names those that crossed the best baseline either way: what a change
gains and what it costs, which the counts alone net out.
The baselines and the bound do not depend on HTDA's code: ``--baselines``
takes them from an earlier judge's folder instead of replaying them again
(the slow part: PFOO-L).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from htda.simulator.generator import AnalysisWorkload  # noqa: E402
from htda.simulator.suite import TIE, at_or_above  # noqa: E402
from htda.simulator.trace import TRACE_PATTERNS, is_trace_file, trace_name, write_csv  # noqa: E402

BASELINES = ("lru", "lfu", "arc", "s3fifo", "wtinylfu")
TRACE_SIZES = ("1%", "5%", "10%", "20%", "50%")
SYNTHETIC_SIZES = ("0.25%", "0.5%", "1%", "2%", "3%", "4%", "5%", "10%", "20%", "50%")
HTDA = "htda(auto)"
BOUND = "pfoo-l"


@dataclass
class Cell:
    """One (trace, size): HTDA's byte hit ratio in each sample, the best baseline's and the bound's."""

    trace: str
    size: str
    htda: list[float]
    best_name: str
    best: float
    bound: float

    def at_or_above(self, sample: int) -> bool:
        return at_or_above(self.htda[sample], self.best)


def simulate_command(target: Sequence[str], sizes: Sequence[str], seed: int, with_baselines: bool,
                     hindsight: bool = False) -> list[str]:
    """The ``htda simulate`` child of one replay: HTDA's default alone (with LRU, the cheapest baseline, since
    the command always replays one), or with every baseline and the bound; with ``hindsight``, each of the
    default's candidates alone too."""
    command = [sys.executable, "-c", "from htda.cli import main; main()", "simulate", *target,
               "--sizes", ",".join(sizes), "--half-lives", "auto", "--admission", "none", "--no-belady",
               "--sample-seed", str(seed), "--json"]
    return (command + (["--hindsight"] if hindsight else [])
            + ([] if with_baselines else ["--policies", "lru", "--no-bound"]))


def replay(command: list[str], out: Path) -> Path:
    """Run one replay into ``out`` unless it is there already (written whole: a cut-off run leaves nothing)."""
    if not out.exists():
        path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
        done = subprocess.run(command, capture_output=True, text=True, check=False, cwd=REPO,
                              env={**os.environ, "PYTHONPATH": path})
        if done.returncode:
            raise SystemExit(f"{' '.join(command[3:])}: rc {done.returncode}\n{done.stderr.strip()}")
        partial = out.with_suffix(".partial")
        partial.write_text(done.stdout)
        partial.replace(out)
    return out


def ratios(path: Path) -> dict[tuple[str, int], float]:
    """(policy, size index) -> byte hit ratio, from ``htda simulate --json``'s results."""
    results = json.loads(path.read_text())["results"]
    capacities = sorted({r["capacity_bytes"] for r in results})
    return {(r["policy"], capacities.index(r["capacity_bytes"])): r["byte_hit_ratio"] for r in results}


def speed(path: Path, policy: str = HTDA) -> float:
    """A policy's replay speed over its sizes, requests a second of CPU (0 if the file has none of it)."""
    data = json.loads(path.read_text())
    times = [r["cpu_seconds"] for r in data["results"] if r["policy"] == policy]
    return data["requests"] * len(times) / sum(times) if sum(times) else 0.0


def speed_lines(traces: Sequence[Path], out: Path, source: Path, jobs: int) -> list[str]:
    """HTDA's replay speed (sample 0), and as a share of LRU's on the same trace: a machine's speed varies from one
    session to the next (by 2-3 times between the machines of 2026-12-05 and 2026-12-07), the share much less.
    LRU's is from the same run when it rode along, else from the baselines' run."""
    speeds = sorted((speed(out / f"{trace_name(t)}.s0.json"), trace_name(t)) for t in traces)
    lines = [f"htda(auto) replay, requests a second of CPU (sample 0): slowest {speeds[0][0]:,.0f} ({speeds[0][1]}), "
             f"median {speeds[len(speeds) // 2][0]:,.0f}"
             + ("" if jobs == 1 else f" ({jobs} replays at a time share the machine: --jobs 1 for the speed)")]
    shares = []
    for t in traces:
        mine = out / f"{trace_name(t)}.s0.json"
        lru = speed(mine, "lru") or speed(source / f"{trace_name(t)}.s0.json", "lru")
        if lru:
            shares.append((speed(mine) / lru, trace_name(t)))
    if shares:
        shares.sort()
        lines.append(f"  as a share of LRU's speed on the same trace: lowest {shares[0][0]:.2f} ({shares[0][1]}), "
                     f"median {shares[len(shares) // 2][0]:.2f}")
    return lines


def cells_of(name: str, sizes: Sequence[str], baseline_file: Path, sample_files: Sequence[Path]) -> list[Cell]:
    base = ratios(baseline_file)
    samples = [ratios(f) for f in sample_files]
    cells = []
    for i, size in enumerate(sizes):
        best_name = max(BASELINES, key=lambda p: base[p, i])
        cells.append(Cell(name, size, [s[HTDA, i] for s in samples], best_name, base[best_name, i],
                          base[BOUND, i]))
    return cells


def plan(traces: Sequence[Path], out: Path, samples: int, baselines: Path | None,
         synthetic_requests: int, hindsight: bool = False) -> list[tuple[list[str], Path]]:
    """Every replay the judgement needs, the longest first (so that two at a time finish together)."""
    jobs = []
    for trace in sorted(traces, key=lambda t: -t.stat().st_size):
        if hindsight:
            jobs.append((simulate_command([str(trace)], TRACE_SIZES, 0, False, hindsight=True),
                         out / f"{trace_name(trace)}.hindsight.json"))
        for seed in range(samples):
            full = seed == 0 and baselines is None  # the baselines and the bound ride along with sample 0
            jobs.append((simulate_command([str(trace)], TRACE_SIZES, seed, full),
                         out / f"{trace_name(trace)}.s{seed}.json"))
    if synthetic_requests:
        target = ["--synthetic", "--requests", str(synthetic_requests)]
        jobs.append((simulate_command(target, SYNTHETIC_SIZES, 0, baselines is None), out / "synthetic.s0.json"))
    return jobs


def perfect_choice(cells: Sequence[Cell], hindsight: dict[str, Path], gap: float) -> list[str]:
    """What a choice among the default's candidates could reach at best (sample 0): in each cell the best of
    ``htda(auto)`` and of each candidate alone, as an oracle that knew the trace would pick; and the single
    candidate at or above the best baseline in the most cells.  Where even the oracle is below the best
    baseline, the candidates lack something no choice among them can give.  ``hindsight``: each trace's
    replay with ``--hindsight``, by trace name."""
    by_trace = {name: ratios(path) for name, path in hindsight.items()}
    names = dict.fromkeys(policy for replayed in by_trace.values() for policy, _ in replayed  # (in replay order)
                          if policy.startswith("htda(") and policy != HTDA)
    # candidate -> its byte hit ratio in each cell (a cell a candidate is missing from is an error, not a shift)
    alone = {name: [by_trace[c.trace][name, TRACE_SIZES.index(c.size)] for c in cells] for name in names}
    if not alone:
        return []
    oracle = [max([c.htda[0], *(column[i] for column in alone.values())]) for i, c in enumerate(cells)]
    lead = sum(o - c.best for o, c in zip(oracle, cells))
    wins = sum(at_or_above(o, c.best) for o, c in zip(oracle, cells))
    single = {name: sum(at_or_above(r, c.best) for r, c in zip(column, cells)) for name, column in alone.items()}
    best_single = max(single, key=single.__getitem__)
    # an oracle that may also pick the best baseline itself: what a choice among every policy replayed reaches
    everything = sum(max(o - c.best, 0.0) for o, c in zip(oracle, cells))
    return ["", f"a perfect choice among the {len(alone)} candidates (hindsight, sample 0, cell by cell): "
                f"{wins} of {len(cells)} cells, mean {lead / len(cells):+.4f}"
                + (f", gap closed {100 * lead / gap:.1f} %" if gap > TIE else "")
                + f"; below the best baseline whatever the choice: {len(cells) - wins}; "
                  f"the best single candidate: {best_single}, {single[best_single]} cells",
            f"a perfect choice among them and the baselines: mean {everything / len(cells):+.4f}"
            + (f", gap closed {100 * everything / gap:.1f} %" if gap > TIE else "")]


def trace_cells(traces: Sequence[Path], source: Path, out: Path, samples: int) -> list[Cell]:
    """The cells of every trace, the baselines and the bound from ``source``, HTDA's samples from ``out``."""
    return [cell for trace in sorted(traces) for cell in cells_of(
        trace_name(trace), TRACE_SIZES, source / f"{trace_name(trace)}.s0.json",
        [out / f"{trace_name(trace)}.s{seed}.json" for seed in range(samples)])]


def synthetic_cells(source: Path, out: Path) -> list[Cell]:
    """The synthetic workload's cells, its baselines from ``source``, HTDA's sample 0 from ``out``."""
    return cells_of("synthetic", SYNTHETIC_SIZES, source / "synthetic.s0.json", [out / "synthetic.s0.json"])


def comparison(cells: Sequence[Cell], before: Sequence[Cell], label: str) -> list[str]:
    """The cells whose HTDA (sample 0) differs from ``before``'s (another judge's folder, ``label``), the most
    lost first; and which of them crossed the best baseline, either way.  Cells ``before`` lacks are left out."""
    def crossed(now: Cell, then: Cell) -> str:
        return "" if now.at_or_above(0) == then.at_or_above(0) else "gained" if now.at_or_above(0) else "lost"

    earlier = {(c.trace, c.size): c for c in before}
    moved = sorted(((c, earlier[c.trace, c.size]) for c in cells
                    if (c.trace, c.size) in earlier and c.htda[0] != earlier[c.trace, c.size].htda[0]),
                   key=lambda pair: pair[0].htda[0] - pair[1].htda[0])
    named = {way: ", ".join(f"{c.trace} {c.size}" for c, b in moved if crossed(c, b) == way) or "none"
             for way in ("gained", "lost")}
    lines = ["", f"against {label} (sample 0): {len(moved)} cells moved; at or above the best baseline now, not "
                 f"before: {named['gained']}; before, not now: {named['lost']}"]
    for c, b in moved:
        lines.append(f"  {c.trace + ' ' + c.size:<22}{b.htda[0]:.4f} -> {c.htda[0]:.4f} "
                     f"{c.htda[0] - b.htda[0]:+.4f}  ({c.best_name} {c.best:.4f}) {crossed(c, b)}".rstrip())
    return lines


def report(traces: Sequence[Path], out: Path, samples: int, baselines: Path | None,
           synthetic_requests: int, jobs: int = 1, hindsight: bool = False, against: Path | None = None) -> str:
    source = baselines or out
    cells = trace_cells(traces, source, out, samples)
    lines = [f"htda(auto) against the best of {', '.join(BASELINES)} and the PFOO-L bound: {len(traces)} traces at "
             f"{', '.join(TRACE_SIZES)} of each footprint ({len(cells)} cells), {samples} samples of the groups",
             "", f"{'sample':<8}{'cells at or above':>20}{'mean vs best':>15}{'gap closed':>13}"]
    gap = sum(c.bound - c.best for c in cells)
    for seed in range(samples):
        lead = sum(c.htda[seed] - c.best for c in cells)
        wins = sum(c.at_or_above(seed) for c in cells)
        lines.append(f"{seed:<8}{f'{wins} of {len(cells)}':>20}{lead / len(cells):>+15.4f}"
                     f"{(f'{100 * lead / gap:.1f} %' if gap > TIE else '-'):>13}")
    every = [c for c in cells if all(c.at_or_above(s) for s in range(samples))]
    none = [c for c in cells if not any(c.at_or_above(s) for s in range(samples))]
    varying = [f"{c.trace} {c.size}" for c in cells if c not in every and c not in none]
    lines += ["", f"at or above in every sample: {len(every)}; in none: {len(none)}; "
                  f"varying with the sample: {len(varying)}" + (f" ({', '.join(varying)})" if varying else "")]
    worst = sorted(cells, key=lambda c: min(c.htda) - c.best)[:5]
    lines.append("worst cells (the lowest sample): " + "; ".join(
        f"{c.trace} {c.size} {min(c.htda) - c.best:+.4f} ({c.best_name})" for c in worst))
    if hindsight:
        lines += perfect_choice(cells, {trace_name(t): out / f"{trace_name(t)}.hindsight.json" for t in traces}, gap)
    lines += speed_lines(traces, out, source, jobs)
    if synthetic_requests:
        synthetic = synthetic_cells(source, out)
        below = [c.size for c in synthetic if not c.at_or_above(0)]
        lines += ["", f"synthetic analysis workload ({synthetic_requests:,} requests): "
                      f"{len(synthetic) - len(below)} of {len(synthetic)} sizes at or above the best baseline"
                      + (f", below at {', '.join(below)}" if below else ""),
                  "  ".join(f"{c.size} {c.htda[0]:.4f} vs {c.best_name} {c.best:.4f}" for c in synthetic)]
        cells = [*cells, *synthetic]
    if against is not None:
        present = [t for t in traces if (against / f"{trace_name(t)}.s0.json").exists()]
        before = trace_cells(present, source, against, 1)
        if synthetic_requests and (against / "synthetic.s0.json").exists():
            before += synthetic_cells(source, against)
        lines += comparison(cells, before, str(against))
    return "\n".join(lines)


def generated_traces(folder: Path, count: int) -> Path:
    """``count`` traces of the synthetic analysis workload (20,000 requests, seeds 1, 2, ...) as CSV files in
    ``folder``: for a run of the machinery where the public traces are not at hand (``make bench``)."""
    folder.mkdir(parents=True, exist_ok=True)
    for seed in range(1, count + 1):
        write_csv(folder / f"generated-{seed}.csv", AnalysisWorkload(requests=20_000, seed=seed).rows())
    return folder


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("traces", type=Path, nargs="?",
                        help=f"a folder of traces (every {TRACE_PATTERNS} in it)")
    parser.add_argument("--generated", type=int, metavar="N",
                        help="instead of a folder, N generated traces of the synthetic workload (a smoke run)")
    parser.add_argument("--out", type=Path, help="where the replays' JSON is kept (default: a temporary folder)")
    parser.add_argument("--samples", type=int, default=5, help="sample seeds 0 .. N-1 (default 5)")
    parser.add_argument("--baselines", type=Path, help="an earlier judge's --out: its baselines and bound")
    parser.add_argument("--synthetic-requests", type=int, default=1_000_000,
                        help="requests of the synthetic workload (0: leave it out)")
    parser.add_argument("--jobs", type=int, default=2, help="replays at a time (default 2)")
    parser.add_argument("--hindsight", action="store_true",
                        help="also replay each candidate alone (sample 0, the traces) and report what a perfect "
                             "choice among them would reach")
    parser.add_argument("--against", type=Path, metavar="OTHER_OUT",
                        help="an earlier judge's --out (another build's): list the cells where HTDA moved since, "
                             "and those that crossed the best baseline")
    args = parser.parse_args(argv)
    if (args.traces is None) == (args.generated is None):
        parser.error("give a folder of traces or --generated N, not both")
    if args.samples < 1 or args.jobs < 1 or args.synthetic_requests < 0 or (args.generated or 1) < 1:
        parser.error("--samples, --jobs and --generated must be at least 1, --synthetic-requests not negative")
    for name, folder in (("--baselines", args.baselines), ("--against", args.against)):
        if folder is not None and not folder.is_dir():
            parser.error(f"{name} {folder}: not a folder")
    with tempfile.TemporaryDirectory(prefix="htda-judge-") as scratch:
        out = args.out or Path(scratch)
        out.mkdir(parents=True, exist_ok=True)
        folder = args.traces if args.generated is None else generated_traces(out / "generated", args.generated)
        traces = sorted(filter(is_trace_file, folder.iterdir()))
        if not traces:
            parser.error(f"{folder}: no traces in it ({TRACE_PATTERNS})")
        jobs = plan(traces, out, args.samples, args.baselines, args.synthetic_requests, args.hindsight)
        with ThreadPoolExecutor(args.jobs) as pool:
            for done, path in enumerate(pool.map(lambda job: replay(*job), jobs), 1):
                print(f"[{done}/{len(jobs)}] {path.name}", file=sys.stderr, flush=True)
        print(report(traces, out, args.samples, args.baselines, args.synthetic_requests, args.jobs, args.hindsight,
                     args.against))


if __name__ == "__main__":
    main()

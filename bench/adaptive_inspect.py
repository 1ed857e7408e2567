"""Look inside the adaptive rating's choice on one trace at one cache size: where ``htda(auto)`` loses.

    python bench/adaptive_inspect.py TRACE.csv --size 50%
    python bench/adaptive_inspect.py TRACE.csv --size 10% --rounds 560000 640000 --sample-seed 2
    python bench/adaptive_inspect.py TRACE.csv --size 50% --max-sampled 100000000   # every group sampled
    python bench/adaptive_inspect.py --synthetic 20000 --size 2%    # the analysis workload (make bench's smoke run)

It replays ``htda(auto)`` as ``htda simulate --half-lives auto --admission
none`` does (the same objects, the same cache; the rating's keyword
arguments may be changed for the investigation) and prints:

- the real cache's byte hit ratio, and every change of what it ranks by
  (half-life, layout), counted switches and the smaller shadows' picks
  alike, with the request time it happened at;
- each shadow's byte hit ratio over the whole trace (its hits summed over
  every round, over the bytes the rounds asked for): what the choice would
  have ranked the candidates by with an infinite memory.  Beside
  ``htda simulate --hindsight`` (each candidate's real cache alone) it
  tells a misranking (the shadows disagree with the real caches: a
  sampling question) from a switching cost (they agree, and the choice
  still lost);
- with ``--rounds FROM TO``, every round that ended between those times:
  the active half-life's shadows' share of the round's bytes, their quick
  totals, and what the choice did.

Read-only: a tool for the investigations of ``docs/simulator-history.rst``,
not a benchmark (it prints no speed).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from htda.coordinator.adaptive import LAYOUTS, AdaptiveLRFUPolicy  # noqa: E402
from htda.simulator.engine import replay  # noqa: E402
from htda.simulator.generator import AnalysisWorkload  # noqa: E402
from htda.simulator.report import parse_size  # noqa: E402
from htda.simulator.run import AUTO, RunSpec, build_policies  # noqa: E402
from htda.simulator.trace import Reading, footprint_and_replay, trace_reader, write_csv  # noqa: E402


class Watch:
    """What the rating did, round by round: its (half-life, layout) changes and each shadow's summed hits."""

    def __init__(self, policy: AdaptiveLRFUPolicy[Any], rounds: tuple[float, float] | None):
        self.policy, self.rounds = policy, rounds
        self.shown = len(policy.choice.quick.totals)
        self.hits = [0.0] * self.shown
        self.requested = 0.0
        self.changes: list[tuple[float, str, str]] = []
        self._decide = policy._decide
        policy._decide = self.decide  # type: ignore[method-assign]

    def ranking(self) -> tuple[float, str]:
        return self.policy.half_life, LAYOUTS[self.policy.layout]

    def decide(self, hits: list[float]) -> None:
        policy = self.policy
        requested = policy._round_bytes
        before = self.ranking()
        self.requested += requested
        for i in range(self.shown):
            self.hits[i] += hits[i]
        self._decide(hits)
        after = self.ranking()
        if after != before:
            self.changes.append((policy._now, f"{after[0]:g}", after[1]))
        if self.rounds and self.rounds[0] <= policy._now <= self.rounds[1] and requested:
            self.show_round(hits, requested, before, after)

    def show_round(self, hits: list[float], requested: float, before: tuple[float, str],
                   after: tuple[float, str]) -> None:
        policy, active = self.policy, f"{before[0]:g}"
        quick = policy.shadow_hit_ratios()  # keyed by (half-life, layout), in the policy's order of shadows
        mine = [(i, layout) for i, (half_life, layout) in enumerate(quick) if half_life == active]
        shares = " ".join(f"{layout[:5]} {hits[i] / requested:.3f}" for i, layout in mine)
        totals = " ".join(f"{quick[active, layout]:.3f}" for _, layout in mine)
        print(f"  {policy._now:>14,.0f}  {active:>9} {before[1]:<9}  round: {shares}  quick: {totals}"
              f"  -> {after[0]:g} {after[1]}{' settled' if policy.settled else ''}")

    def summary(self, top: int) -> list[str]:
        labels = list(self.policy.shadow_hit_ratios())  # (half-life, layout) of each shadow, in their order
        ratios = sorted(((hits / self.requested if self.requested else 0.0, *label)
                         for hits, label in zip(self.hits, labels)), reverse=True)
        return [f"  {ratio:.4f}  {half_life:>9} {layout}" for ratio, half_life, layout in ratios[:top]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace", nargs="?", help="a CSV trace (timestamp,object_id,size_bytes[,group_id])")
    parser.add_argument("--synthetic", type=int, metavar="REQUESTS",
                        help="instead of a trace, the synthetic analysis workload of this many requests")
    parser.add_argument("--size", required=True, help="cache size: bytes, or a share of the footprint (10%%)")
    parser.add_argument("--sample-seed", type=int, default=0, help="the shadows' sample of the groups (default 0)")
    parser.add_argument("--max-sampled", type=int, help="the rating's max_sampled (default: its own)")
    parser.add_argument("--rounds", nargs=2, type=float, metavar=("FROM", "TO"),
                        help="print every round that ended between these request times")
    parser.add_argument("--top", type=int, default=10, help="shadows listed, best first (default 10)")
    parser.add_argument("--time-unit", type=float, default=1.0, help="seconds per unit of the timestamps")
    args = parser.parse_args(argv)
    if (args.trace is None) == (args.synthetic is None):
        parser.error("give a trace or --synthetic REQUESTS, not both")
    try:
        if args.synthetic is None:
            return inspect(args)
        with tempfile.TemporaryDirectory() as folder:
            args.trace = str(Path(folder) / "synthetic.csv")
            write_csv(args.trace, AnalysisWorkload(requests=args.synthetic).rows())
            return inspect(args)
    except (OSError, ValueError) as exc:  # a missing or malformed trace, a bad size: said plainly
        parser.error(str(exc))


def inspect(args: argparse.Namespace) -> int:
    reader = trace_reader(args.trace, Reading(time_unit=args.time_unit))
    with footprint_and_replay(reader.chunks) as first:
        capacity = parse_size(args.size, first.footprint)
        spec = RunSpec(capacities=[capacity], half_lives=[AUTO], baselines=[], belady=False, bound=False,
                       sample_seed=args.sample_seed, objects=first.objects)
        (cache,) = build_policies(spec)
        policy = cache.rating
        if args.max_sampled:
            policy.max_sampled = args.max_sampled
        watch = Watch(policy, tuple(args.rounds) if args.rounds else None)
        if args.rounds:
            print(f"rounds ending between {args.rounds[0]:,.0f} and {args.rounds[1]:,.0f}:")
        result = replay(first.for_replay(), [cache])
    (row,) = result.results
    print(f"{args.trace}: {result.requests:,} requests, cache {args.size} of the footprint ({capacity:,} bytes)")
    print(f"htda(auto) byte hit ratio {result.byte_hit_ratio(row):.4f}; {policy.switches} switches counted, "
          f"shadows sampling {policy.sample_rate:g} of the groups")
    print("what it ranked by (request time, half-life, layout):")
    print("\n".join(f"  {t:>14,.0f}  {h:>9} {layout}" for t, h, layout in watch.changes) or "  (the start only)")
    print("each shadow's byte hit ratio over the whole trace (sampled groups; best first):")
    print("\n".join(watch.summary(args.top)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``htda simulate`` (replay a trace through HTDA's policy and the baselines, sweep sizes x half-lives) and
``htda trace generate`` (write a synthetic analysis trace)."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any

from .. import units
from ..units import duration_text
from . import TRACE_FORMATS
from .generator import AnalysisWorkload

if TYPE_CHECKING:
    from .run import RunSpec
    from .trace import Columns, Reading

# The replay modules (numpy, the coordinator's rating) are imported by the commands that run, not here:
# building these parsers is part of every `htda` command, `htda --help` included.

__all__ = ["add_parser", "parse_duration"]

SIMULATE_HALF_LIVES = "auto,5m,1h,1d"
SUITE_HALF_LIVES = "auto,1d"  # the coordinator's default (adaptive) first: the suite's verdict is on it
DEFAULT_ADMISSION = "none,tinylfu"  # the coordinator's default first


def parse_duration(text: str, what: str = "half-life") -> float:
    """``"300"``, ``"90s"``, ``"15m"``, ``"6h"``, ``"2d"``, ``"1w"`` -> seconds (:func:`htda.units.parse_duration`);
    for a half-life also ``"auto"``."""
    if what == "half-life" and text.strip().lower() == "auto":
        return 0.0  # run.AUTO: the adaptive half-life (imported lazily: see above)
    return units.parse_duration(text, what)


def _number(minimum: float, what: str, hint: str):
    """An argparse type: a finite number >= ``minimum``, refused with a message naming ``what`` and giving ``hint``."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and value >= minimum):
            raise argparse.ArgumentTypeError(f"{what} {text!r}: give {hint}")
        return value

    return parse


def _count(minimum: int, what: str):
    """An argparse type: an integer >= ``minimum``, refused with a message naming ``what``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} {text!r} is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{what} must be >= {minimum}, not {value}")
        return value

    return parse


def _split(text: str) -> list[str]:
    return [part for part in (p.strip() for p in text.split(",")) if part]


def _workload(args: argparse.Namespace) -> AnalysisWorkload:
    return AnalysisWorkload(requests=args.requests, seed=args.seed, live_datasets=args.live_datasets,
                            analysts=args.analysts, zipf=args.zipf, turnover=args.turnover, chunk_size=args.chunk)


def _source(args: argparse.Namespace) -> tuple[Any, int | None, str]:
    """The trace to replay, its length if known, and a description."""
    if args.synthetic:
        w = _workload(args)
        return w, w.requests, f"synthetic analysis workload (seed {w.seed})"
    from .report import parse_size
    from .trace import STDIN, CsvTraceReader, count_requests, is_stream, trace_reader

    if args.history:
        from .history import HistoryTrace

        h = HistoryTrace(args.history, chunk_size=args.chunk, unknown_size=parse_size(args.unknown_size),
                         schema=args.schema or None, access_on=args.access_on)
        return h, h.requests(), f"coordinator history {args.history}"
    if not args.trace:
        raise ValueError("give a trace file, --synthetic or --history URL")
    reading = _reading(args)
    reader = trace_reader(args.trace, reading, chunk_size=args.chunk)
    if args.sort:
        print(f"htda simulate: --sort: {args.trace} is read whole and sorted by time before its replay starts",
              file=sys.stderr)
    if is_stream(args.trace):  # read once, by the replay: no look ahead at its unit or its length
        return reader, None, f"trace {'standard input' if args.trace == STDIN else args.trace}"
    if isinstance(reader, CsvTraceReader):  # a binary trace's timestamps are in its format's unit
        _hint_time_unit(args.trace, reading)
    return reader, count_requests(args.trace, args.format), f"trace {args.trace}"


def _columns(text: str) -> Columns:
    from .trace import Columns

    try:
        return Columns.given(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


#: what --delimiter may name (None: any run of spaces and tabs)
_DELIMITERS: dict[str, str | None] = {"comma": ",", "tab": "\t", "space": None}


def _delimiter(text: str) -> str | None:
    if text in _DELIMITERS:
        return _DELIMITERS[text]
    if len(text) == 1 and text not in "\"\r\n":
        return text
    raise argparse.ArgumentTypeError(f"{text!r}: give comma, tab, space (any run of spaces and tabs) or one "
                                     f"character")


def _reading(args: argparse.Namespace) -> Reading:
    """How the trace is read, as the reading options say (:func:`_reading_options`)."""
    from dataclasses import replace

    from .trace import Columns, Reading

    columns = args.columns
    if args.delimiter != ",":
        columns = replace(columns or Columns(), delimiter=args.delimiter)
    return Reading(time_unit=args.time_unit, sort=getattr(args, "sort", False), columns=columns, fmt=args.format)


_TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}


def _time_unit(text: str) -> float:
    """``--time-unit``: s, ms, us, ns or a number of seconds."""
    try:
        unit = _TIME_UNITS[text] if text in _TIME_UNITS else float(text)
    except ValueError:
        unit = math.nan
    if not (math.isfinite(unit) and unit > 0):
        raise argparse.ArgumentTypeError(f"{text!r}: give s, ms, us, ns or a positive number of seconds")
    return unit


def _hint_time_unit(path: str, reading: Reading) -> None:
    """Say so when a trace's timestamps look finer than the seconds they are read as: the half-lives (5m, 1d,
    the adaptive rating's candidates) would then span a moment of the trace."""
    from .trace import first_timestamp, looks_finer_than_seconds

    first = first_timestamp(path, reading.columns)
    if reading.time_unit == 1.0 and first is not None and looks_finer_than_seconds(first):
        print(f"htda simulate: {path} starts at timestamp {first:.6g}, which looks like milliseconds or finer "
              f"since 1970; half-lives are in seconds of the trace's time: give --time-unit ms (or us, ns)",
              file=sys.stderr)


def _plots_available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _candidates(args: argparse.Namespace) -> list[float] | None:
    """The half-lives ``auto`` chooses among, from ``--candidates`` (None: the coordinator's default)."""
    if not args.candidates:
        return None
    return [parse_duration(h, "candidate half-life") for h in _split(args.candidates)]


def cmd_suite(args: argparse.Namespace) -> Any:
    from .suite import run_suite, suite_traces

    reading = _reading(args)
    traces = suite_traces(args.suite, _workload(args) if args.synthetic else None, reading)
    for trace in traces:
        if os.path.isfile(trace.source):
            _hint_time_unit(trace.source, reading.in_suite(trace.source))
    half_lives = [parse_duration(h) for h in _split(args.half_lives or SUITE_HALF_LIVES)]
    shown = args.progress or sys.stderr.isatty()
    report = run_suite(traces, _split(args.policies), half_lives, rating=args.rating,
                       admissions=_split(args.admission), candidates=_candidates(args),
                       hindsight=args.hindsight, sample_seed=args.sample_seed,
                       progress=(lambda line: print(f"htda simulate --suite {line}", file=sys.stderr, flush=True))
                       if shown else None, jobs=args.jobs)
    result: Any = report.text
    if args.json:
        result = [{"trace": v.name, "wins_everywhere": v.wins_everywhere, "gap_closed": v.gap_closed,
                   "summed_gap_closed": v.summed_gap_closed,
                   "sizes": [{"fraction": f, "htda": h, "best_baseline": b, "best_ratio": r, "bound": bound}
                             | ({"hindsight": {"policy": v.hindsight[i][0], "ratio": v.hindsight[i][1]}}
                                if v.hindsight else {})
                             for i, (f, h, b, r, bound) in enumerate(v.rows)]} for v in report.verdicts]
    if not report.unreadable:
        return result
    # the traces that were read are reported, and the run still fails, naming the others
    print(result if isinstance(result, str) else json.dumps(result, indent=2, sort_keys=True), flush=True)
    raise ValueError(f"{len(report.unreadable)} of {len(traces)} traces not replayed: "
                     + "; ".join(why for _, why in report.unreadable))


def cmd_simulate(args: argparse.Namespace) -> Any:
    if args.suite:
        return cmd_suite(args)
    from .engine import Progress
    from .report import as_dict, best_half_lives, human_bytes, summary_table, sweep_table
    from .run import simulate
    from .trace import TraceReader, footprint_and_replay

    args.half_lives = args.half_lives or SIMULATE_HALF_LIVES
    candidates = _candidates(args)  # (a bad one is refused before the trace is read)
    source, total, description = _source(args)
    size_texts = _split(args.sizes)
    if args.out:  # made (or refused) before the replay, which may take long, not after it
        try:
            os.makedirs(args.out, exist_ok=True)
        except OSError as exc:
            raise ValueError(f"--out {args.out}: {exc.strerror or exc}") from None
    plots = bool(args.out) and _plots_available()
    if args.out and not plots:  # said before the replay, which may take long, not after it
        print("htda simulate: matplotlib is not installed: --out writes table.txt and result.json, no plots "
              "(pip install 'htda[plots]')", file=sys.stderr)
    progress = Progress(total or 0, enabled=True if args.progress else None)
    if total and args.sort and isinstance(source, TraceReader):
        source.sorting = lambda done: progress(done, "sorting")
    with ExitStack() as stack:
        footprint, objects, chunks = None, 0, source.chunks()
        if any(s.strip().endswith("%") for s in size_texts):  # a first pass, for the footprint
            first = stack.enter_context(footprint_and_replay(
                source.chunks, lambda done: progress(done, "reading") if total else None))
            footprint, objects, chunks = first.footprint, first.objects, first.for_replay()
            if not footprint:
                raise ValueError(f"{description} has no requests: nothing to simulate" if not objects else
                                 f"{description} requests no bytes (every size is 0): a share of its footprint is "
                                 f"no cache at all")
            description += f" (percentages of its footprint, {human_bytes(footprint)})"
        if args.sample_seed:
            description += f"; htda(auto)'s shadow caches replay sample {args.sample_seed} of the groups"
        spec = _spec(args, size_texts, footprint, candidates, objects)
        window = args.window or (max(1000, total // 100) if total else args.chunk)
        result = simulate(chunks, spec, progress=progress if total else None, window=window)
    progress.close()
    if not result.requests:
        raise ValueError(f"{description} has no requests: nothing to simulate")
    if args.json:
        return as_dict(result)
    text = "\n\n".join([description, summary_table(result), sweep_table(result, True, footprint),
                        sweep_table(result, False, footprint), best_half_lives(result, footprint)])
    if args.out:
        written = _write_outputs(args.out, result, spec, footprint, text, plots)
        text += "\n\nwrote " + ", ".join(written)
    return text


def _spec(args: argparse.Namespace, size_texts: list[str], footprint: int | None,
          candidates: list[float] | None, objects: int = 0) -> RunSpec:
    from .report import parse_size
    from .run import RunSpec

    return RunSpec(capacities=[parse_size(s, footprint) for s in size_texts],
                   half_lives=[parse_duration(h) for h in _split(args.half_lives)],
                   baselines=_split(args.policies), rating=args.rating, per_size=args.per_size,
                   accesses=args.accesses, nodes=args.nodes, belady=not args.no_belady, bound=not args.no_bound,
                   cycle=parse_duration(args.cycle, "cycle") if args.cycle else None, hysteresis=args.hysteresis,
                   admissions=_split(args.admission), candidates=candidates, without_groups=args.without_groups,
                   hindsight=args.hindsight, sample_seed=args.sample_seed, objects=objects, jobs=args.jobs)


def _write_outputs(out: str, result, spec: RunSpec, footprint: int | None, text: str, plots: bool) -> list[str]:
    from .report import as_dict, plot_over_time, plot_sweep

    paths = [os.path.join(out, "table.txt"), os.path.join(out, "result.json")]
    with open(paths[0], "w") as fh:
        fh.write(text + "\n")
    with open(paths[1], "w") as fh:
        json.dump(as_dict(result), fh)
    if not plots:
        return paths
    capacities = sorted(spec.capacities)
    if len(capacities) > 1:
        paths.append(os.path.join(out, "hit_ratio.png"))
        plot_sweep(result, paths[-1], footprint)
    paths.append(os.path.join(out, "over_time.png"))
    plot_over_time(result, capacities[len(capacities) // 2], paths[-1])
    return paths


def cmd_generate(args: argparse.Namespace) -> Any:
    from .report import human_bytes
    from .trace import write_csv

    w = _workload(args)
    rows = write_csv(args.output, w.rows())
    if getattr(args, "json", False):
        return {"file": args.output, "requests": rows, "footprint_bytes": w.footprint_bytes(), "seed": w.seed}
    return f"wrote {rows:,} requests to {args.output} (footprint {human_bytes(w.footprint_bytes())}, seed {w.seed})"


def cmd_info(args: argparse.Namespace) -> Any:
    from .engine import Progress
    from .trace import count_requests, is_stream, trace_reader
    from .trace_info import describe, render

    reader = trace_reader(args.trace, _reading(args), chunk_size=args.chunk)
    progress = Progress(0 if is_stream(args.trace) else count_requests(args.trace, args.format),
                        enabled=True if args.progress else None)
    info = describe(reader, (lambda done: progress(done, "reading")) if progress.total else None)
    progress.close()
    return info.as_dict() if getattr(args, "json", False) else render(info, args.trace)


def _reading_options(p: argparse.ArgumentParser) -> None:
    """How a trace file is read: by ``htda simulate`` and ``htda trace info`` alike."""
    p.add_argument("--time-unit", type=_time_unit, default=1.0,
                   help="unit of a CSV trace's timestamps: s (the default), ms, us, ns or seconds (the half-lives "
                        "are in seconds)")
    p.add_argument("--columns", type=_columns,
                   help="a CSV trace's columns in order, comma-separated: timestamp, object_id, size_bytes, "
                        "group_id, or _ for one not read (_,timestamp,_,size_bytes,object_id); all but object_id "
                        "may be left out.  The file's own header row, if any, is skipped")
    p.add_argument("--delimiter", type=_delimiter, default=",",
                   help="between a CSV trace's fields: comma (the default), tab, space (any run of spaces and "
                        "tabs, as block traces are often written) or one character")
    p.add_argument("--format", choices=TRACE_FORMATS, default="auto",
                   help="the trace's format: csv, oracleGeneral or vscsi (libCacheSim's binary records), or auto "
                        "(the default): oracleGeneral or vscsi if its name says so (*.oracleGeneral*, *.vscsi*), else "
                        "csv; --suite tells each file by its name")
    p.add_argument("--chunk", type=_count(1, "--chunk"), default=65536, help="requests read per chunk")
    p.add_argument("--progress", action="store_true", help="progress bar on stderr even when it is not a tty")


def _workload_options(p: argparse.ArgumentParser) -> None:
    d = AnalysisWorkload()
    g = p.add_argument_group("synthetic workload")
    g.add_argument("--requests", type=_count(0, "--requests"), default=d.requests,
                   help=f"requests to generate (default {d.requests})")
    g.add_argument("--seed", type=_count(0, "--seed"), default=d.seed,
                   help="random seed: the same seed gives the same trace")
    g.add_argument("--live-datasets", type=_count(1, "--live-datasets"), default=d.live_datasets,
                   help="datasets in use at any time")
    g.add_argument("--analysts", type=_count(1, "--analysts"), default=d.analysts,
                   help="analysts making passes at once")
    g.add_argument("--zipf", type=_number(0.0, "--zipf", "a Zipf exponent >= 0 (0: every dataset as popular)"),
                   default=d.zipf,
                   help="popularity skew of the datasets (Zipf exponent, >= 0; 0: all alike)")
    g.add_argument("--turnover", type=_count(1, "--turnover"), default=d.turnover,
                   help="a new dataset replaces the oldest every this many passes")


def add_parser(subparsers) -> None:
    """Register ``htda simulate`` and ``htda trace generate``."""
    from ..coordinator.adaptive import DEFAULT_HALF_LIVES

    p = subparsers.add_parser(
        "simulate", help="replay an access trace through HTDA's policy and others, bounded by the optimum",
        description="Replay a trace (CSV timestamp,object_id,size_bytes[,group_id], or the columns a header row "
                    "names, at least object_id; the coordinator's database, a libCacheSim oracleGeneral or vscsi "
                    "trace, or a synthetic analysis workload) against caches of the given sizes.  Several sizes "
                    "and half-lives make a sweep.")
    p.add_argument("trace", nargs="?", help="CSV trace file, plain or gzip/bzip2/xz/zstd ('-': standard input), or "
                                            "a libCacheSim oracleGeneral or vscsi trace (*.oracleGeneral*, *.vscsi*)")
    p.add_argument("--synthetic", action="store_true", help="replay a generated analysis workload instead")
    p.add_argument("--history", metavar="URL", help="replay the accesses of a coordinator database (SQLAlchemy URL)")
    p.add_argument("--access-on", choices=("submit", "start"), default="submit",
                   help="with --history: what the coordinator counted as an access (its access_on option)")
    p.add_argument("--sizes", default="5%,10%,20%,30%,50%",
                   help="cache sizes: bytes (500G, 1.5TiB) or %% of the trace's footprint, the bytes of its "
                        "distinct objects (default %(default)s)")
    p.add_argument("--half-lives", help=f"HTDA half-lives to compare, 'auto' for the adaptive one (lrfu-adaptive) "
                                        f"(default {SIMULATE_HALF_LIVES}; with --suite "
                                        f"{SUITE_HALF_LIVES}: the first is the one judged)")
    p.add_argument("--candidates", help="the half-lives 'auto' chooses among (the coordinator's "
                                        "adaptive_half_lives; default "
                                        f"{','.join(duration_text(h) for h in DEFAULT_HALF_LIVES)})")
    p.add_argument("--hindsight", action="store_true",
                   help="with --half-lives auto: also replay each candidate it chooses among alone (every half-life "
                        "in every layout, never switching): what the online choice gives up against the best of "
                        "them in hindsight")
    p.add_argument("--sample-seed", type=_count(0, "--sample-seed"), default=0, metavar="N",
                   help="which sample of the groups the adaptive rating's shadow caches replay (default 0, the "
                        "coordinator's): on a trace of more groups than it samples, runs with a few seeds show how "
                        "much of a difference the sample makes")
    p.add_argument("--suite", metavar="DIR", help="replay every trace of DIR (*.csv[.gz|.bz2|.xz|.zst], "
                                                  "*.oracleGeneral*, *.vscsi*; and --synthetic) at 1-50 %% of "
                                                  "each footprint against every baseline; print reST tables")
    p.add_argument("--policies", default="lru,lfu,arc,s3fifo,wtinylfu", help="baseline policies (default %(default)s)")
    p.add_argument("--rating", default="lrfu", help="coordinator rating policy (htda.policies entry point)")
    p.add_argument("--admission", default=DEFAULT_ADMISSION,
                   help="HTDA's admission filters to compare, each at every half-life (tinylfu, none; the "
                        "coordinator's admission option; default %(default)s: the first is the one judged)")
    p.add_argument("--accesses", choices=("job", "request"), default="job",
                   help="a group's access: one per job (requests of a group at one timestamp) or per request")
    p.add_argument("--without-groups", action="store_true",
                   help="also replay HTDA with the trace's groups removed (every request its own group): the "
                        "group rule's effect (--suite does it for every trace that has groups)")
    p.add_argument("--per-size", action="store_true", help="rate files per byte (the coordinator's size option)")
    p.add_argument("--nodes", type=int, default=1,
                   help="split each cache over this many nodes; HTDA then runs with the coordinator's placement")
    p.add_argument("--cycle", help="seconds between placement cycles (default 5m with --nodes > 1; on one node: "
                                   "also run HTDA with placement cycles)")
    p.add_argument("--hysteresis", default=2.0,
                   type=_number(1.0, "--hysteresis", "a factor >= 1 (how many times better a file must score to "
                                                     "displace a placed one, as the coordinator's hysteresis)"),
                   help="placement hysteresis, a factor >= 1 (default %(default)s)")
    p.add_argument("--no-belady", action="store_true", help="skip Belady's MIN")
    p.add_argument("--no-bound", action="store_true", help="skip the PFOO-L upper bound")
    p.add_argument("--out", help="directory for table.txt, result.json and the PNG plots")
    _reading_options(p)
    p.add_argument("--sort", action="store_true",
                   help="replay a trace whose requests are out of time order (a log several threads wrote) in time "
                        "order, requests of one timestamp in the file's order: read whole into memory first (some 80 "
                        "bytes a request at the peak, beside the names); without it such a trace stops at its first "
                        "row out of order")
    p.add_argument("--jobs", type=_count(1, "--jobs"), default=1,
                   help="processes replaying the policies at once, each policy whole in one (default 1; each "
                        "holds one policy's tables, so memory grows with them; the offline passes run beside them); "
                        "with --suite, traces replayed at once, each in a process of its own")
    p.add_argument("--window", type=_count(0, "--window"), default=0,
                   help="requests per point of the over-time series (default, or 0: 1%% of the trace)")
    p.add_argument("--unknown-size", default="1GiB", help="size of history files whose size is unknown")
    p.add_argument("--schema", default="", help="PostgreSQL schema of the coordinator's tables (its config's)")
    _workload_options(p)
    p.set_defaults(func=cmd_simulate)

    t = subparsers.add_parser("trace", help="access traces for the simulator")
    tsub = t.add_subparsers(dest="trace_command", required=True)
    g = tsub.add_parser("generate", help="write a synthetic analysis workload as a CSV trace")
    g.add_argument("output", help="CSV file to write")
    g.add_argument("--chunk", type=int, default=65536, help=argparse.SUPPRESS)
    _workload_options(g)
    g.set_defaults(func=cmd_generate)
    i = tsub.add_parser("info", help="what a trace holds, read once: requests, objects, footprint, groups, time "
                                     "span, rows out of time order, and the hit ratio of a cache that never evicts")
    i.add_argument("trace", help="CSV trace file, plain or gzip/bzip2/xz/zstd ('-': standard input), or a libCacheSim "
                                 "oracleGeneral or vscsi trace")
    _reading_options(i)
    i.set_defaults(func=cmd_info)

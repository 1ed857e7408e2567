"""``htda simulate --suite DIR``: every trace of a folder (and the synthetic workload) against every baseline.

For each trace the suite replays HTDA's policy and the baselines at cache
sizes given as percentages of the trace's footprint, with the PFOO-L bound,
and reports per size whether HTDA reaches the best baseline and how much of
the gap between that baseline and the bound it closes.  The tables are
reStructuredText, so ``docs/simulator.rst`` takes them as printed.

An *object* is an (id, size) pair in every trace (a file whose size changes
is a new object): on real traces counting objects otherwise changes which
policy wins, so every table says so.
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any, cast

from .engine import ReplayResult
from .forked import kill_all, reap, received, send_outcome, start_process
from .generator import AnalysisWorkload
from .report import human_bytes
from .run import RunSpec, htda_label, is_hindsight_label, simulate
from .trace import (
    DEFAULT_READING,
    TRACE_PATTERNS,
    Chunk,
    Reading,
    TraceError,
    footprint_and_replay,
    is_trace_file,
    trace_name,
    trace_reader,
)

__all__ = ["SuiteReport", "SuiteTrace", "TraceVerdict", "at_or_above", "suite_traces", "run_suite", "verdict_of"]

SUITE_SIZES = (0.01, 0.05, 0.10, 0.20, 0.50)
#: how far below the best baseline a ratio may be and still count as at or above it (rounding between policies
#: that hit the same bytes), and the smallest gap to the bound that counts as one
TIE = 1e-9


def at_or_above(ratio: float, best: float) -> bool:
    """Whether ``ratio`` is at or above ``best``, as every verdict of the suite counts it."""
    return ratio >= best - TIE


@dataclass
class SuiteTrace:
    """One trace of the suite: a name, how to read it (again), and where it comes from."""

    name: str
    chunks: Any  # a callable returning an iterator of chunks
    source: str


@dataclass
class TraceVerdict:
    """HTDA against the best baseline at each size of one trace."""

    name: str
    rows: list[tuple[float, float, str, float, float]]  # (fraction, htda, best baseline name, its ratio, bound)
    #: per size, the best candidate of the half-life auto replayed alone and its ratio (with ``hindsight``)
    hindsight: list[tuple[str, float]] = field(default_factory=list)

    @property
    def hindsight_wins(self) -> int:
        """At how many sizes the best candidate alone in hindsight is at or above the best baseline."""
        return sum(at_or_above(ratio, best) for (_, ratio), (_, _, _, best, _) in zip(self.hindsight, self.rows))

    @property
    def wins_everywhere(self) -> bool:
        return all(at_or_above(htda, best) for _, htda, _, best, _ in self.rows)

    @property
    def gap_closed(self) -> float:
        """Mean over sizes of (HTDA - best baseline) / (bound - best baseline); sizes with no gap count 0."""
        shares = [(htda - best) / (bound - best) if bound - best > TIE else 0.0
                  for _, htda, _, best, bound in self.rows]
        return sum(shares) / len(shares) if shares else 0.0

    @property
    def summed_gap_closed(self) -> float | None:
        """(HTDA - best baseline) over (bound - best baseline), each summed over the sizes: the share of the whole
        gap closed, which a size whose gap is tiny cannot swing as it swings :attr:`gap_closed`; None when there is
        no gap."""
        gap = sum(bound - best for _, _, _, best, bound in self.rows)
        return sum(htda - best for _, htda, _, best, _ in self.rows) / gap if gap > TIE else None


def suite_traces(folder: str | os.PathLike, synthetic: AnalysisWorkload | None, reading: Reading = DEFAULT_READING) \
        -> list[SuiteTrace]:
    """The traces of ``folder`` (CSV and binary, sorted by name; each read as :meth:`Reading.in_suite` says),
    then the synthetic workload if given."""
    root = Path(folder)
    if not root.is_dir():
        raise ValueError(f"--suite {folder}: not a folder")
    traces = []
    for path in sorted(filter(is_trace_file, root.iterdir())):
        def read(p: Path = path) -> Iterable[Chunk]:
            return trace_reader(p, reading.in_suite(p)).chunks()

        traces.append(SuiteTrace(trace_name(path), read, str(path)))
    if synthetic is not None:
        described = f"synthetic analysis workload ({synthetic.requests:,} requests, seed {synthetic.seed})"
        traces.append(SuiteTrace("synthetic", synthetic.chunks, described))
    if not traces:
        raise ValueError(f"--suite {folder}: no traces in it ({TRACE_PATTERNS}) "
                         f"and no --synthetic")
    return traces


@dataclass
class SuiteReport:
    """What a suite run gives: the report (reStructuredText), a verdict per trace replayed, and the traces that could
    not be read, each with why (the others are replayed all the same: one bad file does not lose a night's run)."""

    text: str
    verdicts: list[TraceVerdict]
    unreadable: list[tuple[str, str]] = field(default_factory=list)  # (where the trace is, why it was not replayed)


#: one trace's outcome: (its verdict, its section of the report, the CPU seconds it took), or why it was not read
Judged = tuple[TraceVerdict, str, float] | str


def run_suite(traces: list[SuiteTrace], baselines: list[str], half_lives: list[float], rating: str = "lrfu",
              fractions: tuple[float, ...] = SUITE_SIZES,
              admissions: list[str] | None = None,
              candidates: list[float] | None = None, hindsight: bool = False,
              sample_seed: int = 0, progress: Callable[[str], None] | None = None, jobs: int = 1) -> SuiteReport:
    """Replay every trace, saying to ``progress`` when each starts and ends; with ``jobs`` > 1, that many traces at a
    time, each in a process of its own (forked from this one), so that each still reports its own peak RSS."""
    # checked once, before any trace is read; the sizes are each trace's own (from its footprint)
    spec = RunSpec(capacities=[1], half_lives=half_lives, baselines=baselines, rating=rating, belady=False,
                   admissions=admissions or ["none"], candidates=candidates, hindsight=hindsight,
                   sample_seed=sample_seed)
    outcomes: dict[int, Judged] = {}

    def started(i: int) -> None:
        if progress:
            progress(f"[{i + 1}/{len(traces)}] {traces[i].name}: replaying")

    def ended(i: int, outcome: Judged) -> None:
        outcomes[i] = outcome
        if progress:
            step = f"[{i + 1}/{len(traces)}] {traces[i].name}"
            if isinstance(outcome, str):
                progress(f"{step}: not replayed: {outcome}")
                return
            verdict, _, cpu = outcome
            at = sum(at_or_above(htda, best) for _, htda, _, best, _ in verdict.rows)
            progress(f"{step}: HTDA at or above the best baseline at {at} of {len(verdict.rows)} sizes "
                     f"({cpu:.1f} s of CPU)")

    if jobs > 1 and len(traces) > 1:
        _judge_forked(traces, spec, fractions, jobs, started, ended)
    else:
        for i, trace in enumerate(traces):
            started(i)
            ended(i, _judged_or_why(trace, spec, fractions))
    sections, verdicts, unreadable = [], [], []
    for i, trace in enumerate(traces):  # in the traces' order, however they ended
        outcome = outcomes[i]
        if isinstance(outcome, str):
            unreadable.append((trace.source, outcome))
        else:
            verdicts.append(outcome[0])
            sections.append(outcome[1])
    return SuiteReport("\n\n".join(sections + [_summary(verdicts, unreadable, sample_seed)]), verdicts, unreadable)


def _judged_or_why(trace: SuiteTrace, spec: RunSpec, fractions: tuple[float, ...]) -> Judged:
    """:func:`_judged` from a peak RSS started afresh, or why the trace could not be read."""
    _reset_peak_rss()
    try:
        return _judged(trace, spec, fractions)
    except (TraceError, OSError) as exc:
        return str(exc)


def _judge_forked(traces: list[SuiteTrace], spec: RunSpec, fractions: tuple[float, ...], jobs: int,
                  started: Callable[[int], None], ended: Callable[[int, Judged], None]) -> None:
    """Each trace judged in a process forked for it alone, ``jobs`` at a time; ``started(i)`` as each starts,
    ``ended(i, outcome)`` as each ends.
    A process of its own a trace: the peak RSS it reports is the trace's, not that of a larger one before it in
    the same process (what a worker kept from it).  The first error (a trace's process that raised or died, or one
    of ``ended``) kills the processes still replaying: the run ends at once, not when the slowest trace does."""
    running: dict[Connection, tuple[int, BaseProcess]] = {}  # each process's end of its pipe -> (trace, process)
    waiting = list(range(len(traces)))
    try:
        while waiting or running:
            while waiting and len(running) < jobs:
                i = waiting.pop(0)
                started(i)
                # (forked: the child has the traces and the spec, nothing is pickled but the outcome)
                reader, process = start_process(_send_judged, (traces[i], spec, fractions),
                                                f"htda suite {traces[i].name}")
                running[reader] = (i, process)
            for ready in wait(list(running)):
                reader = cast(Connection, ready)  # (wait gives back the readers it was given)
                i, process = running.pop(reader)
                try:
                    outcome = cast(Judged, received(reader, traces[i].source))
                finally:
                    reap(reader, process)
                ended(i, outcome)
    finally:
        kill_all((reader, process) for reader, (_, process) in running.items())


def _send_judged(writer: Connection, trace: SuiteTrace, spec: RunSpec, fractions: tuple[float, ...]) -> None:
    """In a trace's forked process: send its outcome, or the error that ended it."""
    send_outcome(writer, lambda: _judged_or_why(trace, spec, fractions), f"replaying {trace.source}")


def _judged(trace: SuiteTrace, spec: RunSpec, fractions: tuple[float, ...]) -> tuple[TraceVerdict, str, float]:
    """One trace replayed at ``fractions`` of its footprint as ``spec`` says: its verdict, its section of the report
    and the CPU seconds it took."""
    with footprint_and_replay(trace.chunks) as first:
        if not first.footprint:
            raise TraceError(f"{trace.source}: no bytes requested (every size is 0)")
        capacities = [max(1, int(f * first.footprint)) for f in fractions]
        spec = replace(spec, capacities=capacities, objects=first.objects,
                       without_groups=first.grouped)  # the group rule's effect, where it has one
        started = time.process_time()
        result = _size_by_size(first.for_replay, spec)
        cpu = time.process_time() - started
    verdict = verdict_of(trace.name, result, capacities, fractions, spec.baselines, spec.half_lives,
                         spec.admissions[0])
    return verdict, _section(trace, result, capacities, fractions, verdict, cpu), cpu


def _summary(verdicts: list[TraceVerdict], unreadable: list[tuple[str, str]], sample_seed: int) -> str:
    summary = ["Summary", "-------", ""]
    if sample_seed:
        summary += [f"(htda(auto)'s shadow caches replayed sample {sample_seed} of the groups.)", ""]
    for v in verdicts:
        where = "at every size" if v.wins_everywhere else "below the best baseline at " + ", ".join(
            f"{100 * f:g} %" for f, htda, _, best, _ in v.rows if not at_or_above(htda, best))
        summed = ("no gap to close" if v.summed_gap_closed is None
                  else f"of the gap summed over the sizes: {100 * v.summed_gap_closed:+.0f} %")
        line = (f"- {v.name}: HTDA {where}; mean share of the baseline-to-bound gap closed "
                f"{100 * v.gap_closed:+.0f} % ({summed})")
        if v.hindsight:
            line += (f"; its best candidate alone, in hindsight, at or above the best baseline at "
                     f"{v.hindsight_wins} of {len(v.rows)} sizes")
        summary.append(line)
    summary += [f"- not replayed: {why}" for _, why in unreadable]
    return "\n".join(summary)


def verdict_of(name: str, result: ReplayResult, capacities: list[int], fractions: tuple[float, ...],
               baselines: list[str], half_lives: list[float], admission: str = "none") -> TraceVerdict:
    """HTDA as configured (the first half-life and admission: no tuning per trace) against the best baseline at
    each size."""
    ratio = {(r.label, r.capacity): result.byte_hit_ratio(r) for r in result.results}
    rows = []
    for fraction, capacity in zip(fractions, capacities):
        htda = ratio[htda_label(half_lives[0], admission), capacity]
        best = max(baselines, key=lambda b: ratio[b, capacity])
        rows.append((fraction, htda, best, ratio[best, capacity], ratio["pfoo-l", capacity]))
    fixed = list(dict.fromkeys(label for label, _ in ratio if is_hindsight_label(label)))
    hindsight = [max(((label, ratio[label, c]) for label in fixed), key=lambda pair: pair[1])
                 for c in capacities] if fixed else []
    return TraceVerdict(name, rows, hindsight)


def _size_by_size(replayed: Callable[[], Iterable[Chunk] | Callable[[], Iterable[Chunk]]],
                  spec: RunSpec) -> ReplayResult:
    """``spec`` replayed one cache size at a time, each over ``replayed()`` (the first pass's
    :meth:`~.trace.FirstPass.for_replay`), as one result: the policies of one size at a time are in memory, not
    those of all five (on a trace of millions of objects, HTDA keeps hundreds of bytes per object and policy)."""
    parts = []
    for capacity in spec.capacities:  # each size's policies freed as it returns
        parts.append(simulate(replayed(), replace(spec, capacities=[capacity])))
    whole = parts[0]
    for part in parts[1:]:
        whole.results.extend(part.results)
    return whole


def _section(trace: SuiteTrace, result: ReplayResult, capacities: list[int], fractions: tuple[float, ...],
             verdict: TraceVerdict, cpu: float) -> str:
    labels = list(dict.fromkeys(r.label for r in result.results))
    ratio = {(r.label, r.capacity): result.byte_hit_ratio(r) for r in result.results}
    speed = _speeds(result)
    header = ["byte hit ratio"] + [f"{100 * f:g} %" for f in fractions] + ["req/s (cpu)"]
    rows = [[label + (" bound" if label == "pfoo-l" else "")]
            + [f"{ratio[label, c]:.4f}" for c in capacities]
            + [f"{speed[label]:,.0f}" if label in speed else "-"] for label in labels]
    title = f"{trace.name}"
    lines = [title, "~" * len(title), "",
             f"{trace.source}: {result.requests:,} requests, {result.objects:,} objects (an object is an "
             f"(id, size) pair), footprint {human_bytes(result.footprint_bytes)}; sizes in % of the footprint; "
             f"replayed in {cpu:.1f} s of CPU, peak RSS {_peak_rss_mb():.0f} MB.", "", _rst_table(header, rows), ""]
    lines.append("HTDA as configured vs the best baseline: " + "; ".join(
        f"{100 * f:g} % {htda:.4f} vs {best_name} {best:.4f}" for f, htda, best_name, best, _ in verdict.rows))
    if verdict.hindsight:
        lines.append("")
        lines.append("The best candidate alone, in hindsight: " + "; ".join(
            f"{100 * f:g} % {label} {ratio:.4f}" for (f, *_), (label, ratio) in zip(verdict.rows, verdict.hindsight)))
    return "\n".join(lines)


def _speeds(result: ReplayResult) -> dict[str, float]:
    """Requests per second of CPU of each online policy over all its cache sizes (its replays' total CPU time)."""
    cpu: dict[str, list[float]] = {}
    for r in result.results:
        if r.cpu_seconds > 0:
            cpu.setdefault(r.label, []).append(r.cpu_seconds)
    return {label: result.requests * len(times) / sum(times) for label, times in cpu.items()}


def _rst_table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    rule = "  ".join("=" * w for w in widths)
    fmt = lambda cells: "  ".join(c.ljust(w) if i == 0 else c.rjust(w)  # noqa: E731
                                  for i, (c, w) in enumerate(zip(cells, widths))).rstrip()
    return "\n".join([rule, fmt(header), rule, *map(fmt, rows), rule])


def _reset_peak_rss() -> None:
    """Let the peak RSS start again from what the process holds now (Linux's ``clear_refs``), so that each
    trace's table shows its own peak, not the largest trace's before it; elsewhere the peak is the run's."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        pass


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

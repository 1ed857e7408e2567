"""Scale benchmark (issue 18): the locator's index at millions of holdings, one seed with 1,000 members.

Measure first: this prints figures beside the issue's targets and asserts
nothing.  Two parts, each selectable with ``--part``; sizes are options.

**locator** -- the real :class:`htda.locator.index.HoldingsIndex`, in this
process.  It is filled with ``--holdings`` holdings in steps (default 100k,
300k, 1M; each file held by one of ``--nodes`` nodes, LFNs of about 100
characters shaped like CMS NanoAOD paths).  After each step it prints:

- *B/holding*: growth of this process's VmRSS per holding since before the
  index was made (after ``gc.collect()``; LFN strings included, as the
  service holds them);
- *fill/s*: holdings added per CPU second through ``update`` (one delta per node);
- *batch/s*: LFNs looked up per CPU second in batches of ``--batch``
  (``--miss`` of them held by nobody, which take the slower validating
  path); every LFN is a fresh string, as parsed from a request; the median
  of ``--repeat`` runs of ``--lookups`` LFNs;
- *single/s*: lookups of one LFN per CPU second (likewise);
- *report*: CPU seconds to apply a node's full holdings report of 10,000
  files with ``replace`` -- the index alone, and the whole handler path
  (decoding and checking with the route's type, ``normalize_lfn``, ``replace``);
  first for a node new to the index, then the same node again with 10 % of
  its files changed (*again*);
- *drop 10k*: CPU seconds to ``drop`` that node (10,000 holdings);
  *drop N/M*: to drop one of the ``--nodes`` nodes (N/M holdings).

Then each figure is extrapolated to 10M holdings on 1,000 nodes (10,000
per node) and printed beside the targets: RSS <= 2 GB, >= 100,000
lookups/s, report <= 1 s, drop <= 1 s.  These are extrapolations, marked
so, not measurements, in two columns: *scaled* takes the largest step's
figure (RSS in proportion to the holdings, a drop in proportion to the
holdings per node, the rest as measured); *trend* follows a least-squares
line through the steps (costs per operation, never better than the largest
step) -- pessimistic, since the cost of cache misses levels off once the
index is far larger than the CPU's caches, and noisy over short ranges.

**pool** -- one real ``htda-node`` seed as a subprocess, and ``--members``
simulated members in this process, many per sender thread (``--threads``),
each heartbeating on its own schedule every ``--interval`` seconds through
the real :class:`htda.node.client.Client` with signing.  After a warm-up
interval it measures for ``--seconds``:

- heartbeat round-trip latency p50/p99 as a member sees it (answer parsed),
  and the mean time the seed spent in its handler (from its ``/metrics``);
- how late the members' heartbeats were sent (*lag*): a thread sends its
  members' heartbeats one after the other, so slow answers or a busy
  simulator delay the rest -- a large lag means the offered load was lower
  than the schedule's;
- the answer's size in bytes (it carries the whole member list);
- the fewest members listed in any answer (below members + 1: a live
  member expired, i.e. the expiry is too tight for the seed's latency);
- the seed's CPU (% of one core, from /proc/<pid>/stat utime+stime over
  the window), the same per heartbeat (ms), and its RSS; when the pool is
  not 1,000 members at 10 s, the CPU there is bracketed (EXTRAPOLATED)
  between a cost per heartbeat that stays constant and one that grows with
  the members listed in each answer.

Then convergence: ``--churn`` (10 %) of the members stop at once, and the
time until the seed's ``GET /api/v1/pool`` no longer lists any of them
(its floor is the expiry, ``--expiry``, by default two intervals); then as
many new members join at once, and the time until all are listed.  Targets:
p99 < 100 ms, converged within two intervals, seed CPU < 25 % of a core.

**failover** -- two coordinators (``htda-node`` subprocesses) on one
database (``--database``, default the local PostgreSQL in a fresh schema):
one leads, the other stands by.  A sender posts batches of ``--batch-jobs``
job records as fast as they are taken, to the first coordinator that takes
them (as the submit agent does); after ``--before`` seconds the leader is
killed with SIGKILL.  Printed: the jobs acknowledged before and after, the
takeover time (the kill until the standby advertises the coordinator
role), the sender's gap (the kill until its next acknowledged batch), and
the acknowledged jobs missing from the database afterwards (must be 0).

    python bench/scale.py --quick                           # locator and pool, small: under a minute
    python bench/scale.py --part locator --holdings 100000,300000,1000000 --nodes 1000
    python bench/scale.py --part pool --members 1000 --interval 10 --seconds 60
    python bench/scale.py --part failover

Figures taken on a busy machine are inflated (latency most); CPU-time
figures (process_time, /proc) are less affected than wall times.
"""

from __future__ import annotations

import argparse
import gc
import heapq
import itertools
import json
import os
import queue
import random
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout: testkit/ is not installed

from htda.coordinator.store import with_driver  # noqa: E402
from htda.lfn import normalize_lfn  # noqa: E402
from htda.locator.index import HoldingsIndex  # noqa: E402
from htda.node.client import Client, ClientError  # noqa: E402
from htda.protocol import paths  # noqa: E402
from htda.protocol.base import decode  # noqa: E402
from htda.protocol.locator import HoldingsRequest  # noqa: E402
from testkit.nodes import SECRET, NodeProcess, free_port, wait_until, write_config  # noqa: E402
from testkit.processes import ProcSample, proc_sample  # noqa: E402

TARGET_HOLDINGS = 10_000_000
TARGET_NODES = 1_000
TARGET_RSS_GB = 2.0
TARGET_LOOKUPS = 100_000
TARGET_REPORT_S = 1.0
TARGET_DROP_S = 1.0
TARGET_P99_MS = 100.0
TARGET_CPU_PCT = 25.0
TARGET_MEMBERS = 1_000
TARGET_INTERVAL = 10.0

REPORT_FILES = 10_000  # a node's full holdings report
REPORT_NODE = "wn-report.pool.example.org"
REPORT_BASE = 2_000_000_000  # LFN numbers of the report node's files (far above the filled ones)
MISS_BASE = 3_000_000_000  # LFN numbers nobody holds
GB = 1024**3
MB = 1024**2

#: option -> (full default, --quick default); an option given on the command line wins over both
DEFAULTS: dict[str, tuple[Any, Any]] = {
    "holdings": ([100_000, 300_000, 1_000_000], [20_000]),
    "nodes": (1_000, 100),
    "lookups": (100_000, 20_000),
    "members": (1_000, 100),
    "interval": (10.0, 2.0),
    "seconds": (60.0, 15.0),
}

DATASETS = ("DoubleMuon", "EGamma", "JetHT", "SingleMuon", "MuonEG", "Tau", "MET", "BTagMu")


# -- shared ----------------------------------------------------------------------------------------------------------
def lfn(i: int) -> str:
    """A CMS-like NanoAOD path of about 100 characters, distinct for every ``0 <= i < 10**10``."""
    return (f"/store/data/Run2018{'ABCD'[i % 4]}/{DATASETS[i // 4 % 8]}/NANOAOD/UL2018_MiniAODv2_NanoAODv9-v1/"
            f"{i // 1000 % 100_000:05d}/{i * 2654435761 % 2**32:08X}-{i:010d}.root")


def size(i: int) -> int:
    """A file size between 100 MB and 3 GB."""
    return (100 + i * 7919 % 2900) * MB


def percentile(sorted_values: Sequence[float], p: float) -> float:
    """The ``p`` quantile (0..1) of already sorted values; NaN when there are none."""
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, int(p * len(sorted_values)))]


def verdict(value: float, limit: float, at_most: bool) -> str:
    """'meets' or 'misses' the target (``at_most``: the value must not exceed ``limit``)."""
    ok = value <= limit if at_most else value >= limit
    return "meets" if ok else "misses"


# -- locator ---------------------------------------------------------------------------------------------------------
@dataclass
class Step:
    """The figures measured at one fill level of the index."""

    holdings: int
    rss_bytes: int  # growth since before the index was made
    fill_rate: float  # holdings/CPU s
    batch_rate: float  # LFNs/CPU s in batches
    single_rate: float  # single-LFN lookups/CPU s
    report_index: float  # CPU s: replace() of a new node's 10,000 files
    report_full: float  # CPU s: the same with parsing, schema check and normalising
    again_index: float  # CPU s: the same node's report again, 10 % changed
    again_full: float
    drop_report: float  # CPU s: drop() of the 10,000-file node
    drop_node: float  # CPU s: drop() of one of the filled nodes
    drop_node_holdings: int

    @property
    def per_holding(self) -> float:
        return self.rss_bytes / self.holdings


def node_name(n: int) -> str:
    return f"wn{n:04d}.pool.example.org"


def rss_bytes() -> int:
    """This process's resident memory after a full garbage collection."""
    gc.collect()
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def node_files(node: int, start: int, stop: int, nodes: int) -> dict[str, int]:
    """The files numbered ``start <= i < stop`` that belong to ``node`` (those with ``i % nodes == node``)."""
    return {lfn(i): size(i) for i in range(start + (node - start) % nodes, stop, nodes)}


def fill(index: HoldingsIndex, start: int, stop: int, nodes: int) -> float:
    """Add files ``start..stop`` to the index, one delta report per node; return the CPU seconds of the updates."""
    cpu = 0.0
    for node in range(nodes):
        added = node_files(node, start, stop, nodes)
        t0 = time.process_time()
        index.update(node_name(node), added, ())
        cpu += time.process_time() - t0
    return cpu


def lookup_sample(holdings: int, count: int, miss: float, rng: random.Random) -> list[str]:
    """``count`` fresh LFN strings: held ones picked uniformly, a ``miss`` fraction held by nobody."""
    return [lfn(MISS_BASE + rng.randrange(10**6)) if rng.random() < miss else lfn(rng.randrange(holdings))
            for _ in range(count)]


def batch_rate(index: HoldingsIndex, lfns: list[str], batch: int) -> float:
    """LFNs looked up per CPU second, ``batch`` at a time."""
    batches = [lfns[i:i + batch] for i in range(0, len(lfns), batch)]
    t0 = time.process_time()
    for chunk in batches:
        index.lookup(chunk)
    return len(lfns) / max(time.process_time() - t0, 1e-9)


def single_rate(index: HoldingsIndex, lfns: list[str]) -> float:
    """Lookups of one LFN per CPU second."""
    singles = [[name] for name in lfns]
    t0 = time.process_time()
    for one in singles:
        index.lookup(one)
    return len(lfns) / max(time.process_time() - t0, 1e-9)


def report_body(first: int, count: int) -> bytes:
    """A full holdings report of the report node, as a cache node posts it."""
    files = [{"lfn": lfn(i), "size": size(i)} for i in range(first, first + count)]
    return json.dumps({"node": REPORT_NODE, "files": files, "replace": True}, separators=(",", ":")).encode()


def apply_report(index: HoldingsIndex, body: bytes) -> tuple[float, float]:
    """Handle a report as the locator's route does; return CPU seconds (replace alone, whole path)."""
    t0 = time.process_time()
    parsed = decode(body, HoldingsRequest)
    files = {normalize_lfn(f.lfn): f.size for f in parsed.files}
    t1 = time.process_time()
    index.replace(parsed.node, files)
    t2 = time.process_time()
    return t2 - t1, t2 - t0


def timed_drop(index: HoldingsIndex, node: str) -> tuple[float, int]:
    """Drop ``node``; return (CPU seconds, holdings dropped)."""
    t0 = time.process_time()
    dropped = index.drop(node)
    return time.process_time() - t0, dropped


def measure_step(index: HoldingsIndex, holdings: int, nodes: int, baseline: int, fill_cpu: float, added: int,
                 args: argparse.Namespace) -> Step:
    """Every figure at the index's current fill level (``holdings`` holdings on ``nodes`` nodes)."""
    rss = rss_bytes() - baseline
    rng = random.Random(holdings)
    batched = statistics.median(batch_rate(index, lookup_sample(holdings, args.lookups, args.miss, rng), args.batch)
                                for _ in range(args.repeat))
    single = statistics.median(single_rate(index, lookup_sample(holdings, args.lookups, args.miss, rng))
                               for _ in range(args.repeat))
    report_index, report_full = apply_report(index, report_body(REPORT_BASE, REPORT_FILES))
    churn = REPORT_FILES // 10
    again_index, again_full = apply_report(index, report_body(REPORT_BASE + churn, REPORT_FILES))
    drop_report, _ = timed_drop(index, REPORT_NODE)
    drop_node, dropped = timed_drop(index, node_name(0))
    index.update(node_name(0), node_files(0, 0, holdings, nodes), ())  # put it back for the next step
    return Step(holdings, rss, added / max(fill_cpu, 1e-9), batched, single, report_index, report_full,
                again_index, again_full, drop_report, drop_node, dropped)


def extrapolate(xs: Sequence[float], ys: Sequence[float], x: float) -> float:
    """The least-squares line through (xs, ys) at ``x``, never below the figure at the largest x measured."""
    last = ys[max(range(len(xs)), key=lambda i: xs[i])]
    if len(set(xs)) < 2:
        return last
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((a - mx) * (b - my) for a, b in zip(xs, ys)) / sum((a - mx) ** 2 for a in xs)
    return max(last, my + slope * (x - mx))


def print_step_header() -> None:
    print(f"{'holdings':>10} {'B/holding':>9} {'RSS MB':>7} {'fill/s':>8} {'batch/s':>9} {'single/s':>9} "
          f"{'report s':>15} {'again s':>15} {'drop 10k s':>10} {'drop N/M s':>16}")
    print(f"{'':>10} {'':>9} {'':>7} {'':>8} {'':>9} {'':>9} {'index / whole':>15} {'index / whole':>15}")


def print_step(s: Step) -> None:
    print(f"{s.holdings:>10,} {s.per_holding:>9.0f} {s.rss_bytes / MB:>7.0f} {s.fill_rate:>8,.0f} "
          f"{s.batch_rate:>9,.0f} {s.single_rate:>9,.0f} {s.report_index:>7.3f} / {s.report_full:<5.3f} "
          f"{s.again_index:>7.3f} / {s.again_full:<5.3f} {s.drop_report:>10.3f} "
          f"{s.drop_node:>7.4f} ({s.drop_node_holdings:,})", flush=True)


@dataclass
class Projection:
    """One target figure at 10M holdings: scaled from the largest step, and along the trend of the steps."""

    name: str
    scaled: float
    trend: float
    unit: str  # "GB", "/s" or "s"
    limit: float
    at_most: bool

    def show(self, value: float) -> str:
        text = f"{value:,.0f}" if self.unit == "/s" else f"{value:.3f}" if self.unit == "s" else f"{value:.2f}"
        outcome = verdict(value, self.limit, self.at_most)
        return f"{text + (' ' + self.unit if self.unit != '/s' else ''):>9} {outcome:6}"

    def row(self) -> str:
        target = f"{'<=' if self.at_most else '>='} {self.limit:,g}{'' if self.unit == '/s' else ' ' + self.unit}"
        return f"  {self.name:36} {self.show(self.scaled)}  {self.show(self.trend)}   {target}"


def projections(steps: list[Step]) -> list[Projection]:
    """Each target figure at 10M holdings on 1,000 nodes (10,000 per node)."""
    xs = [float(s.holdings) for s in steps]
    big = max(steps, key=lambda s: s.holdings)
    per_node = TARGET_HOLDINGS / TARGET_NODES
    trend = lambda values: extrapolate(xs, values, TARGET_HOLDINGS)
    drop_cost = [s.drop_node / max(s.drop_node_holdings, 1) for s in steps]
    return [
        Projection("RSS of the index", big.per_holding * TARGET_HOLDINGS / GB,
                   trend([s.per_holding for s in steps]) * TARGET_HOLDINGS / GB, "GB", TARGET_RSS_GB, True),
        # A rate follows the trend of its cost per operation (which grows with the index).
        Projection("file lookups/s (batches)", big.batch_rate, 1 / trend([1 / s.batch_rate for s in steps]), "/s",
                   TARGET_LOOKUPS, False),
        Projection("report of 10,000 files (whole path)", big.report_full, trend([s.report_full for s in steps]),
                   "s", TARGET_REPORT_S, True),
        Projection(f"drop of a node of {per_node:,.0f} (from N/M)",
                   big.drop_node / max(big.drop_node_holdings, 1) * per_node, trend(drop_cost) * per_node, "s",
                   TARGET_DROP_S, True),
        Projection("drop of a node of 10,000 (measured)", big.drop_report, trend([s.drop_report for s in steps]), "s",
                   TARGET_DROP_S, True),
    ]


def print_locator_extrapolation(steps: list[Step]) -> None:
    """The projections beside the targets, marked as extrapolations."""
    largest = max(s.holdings for s in steps)
    if largest >= TARGET_HOLDINGS:
        print(f"\nMEASURED at {largest:,} holdings (the target is {TARGET_HOLDINGS:,}): the 'scaled' column is the "
              "largest step's figures; 'trend' is the line through every step")
    else:
        print(f"\nEXTRAPOLATED to {TARGET_HOLDINGS:,} holdings on {TARGET_NODES:,} nodes "
              f"({TARGET_HOLDINGS // TARGET_NODES:,} per node) -- not measured.")
    print(f"  scaled: the largest step ({max(s.holdings for s in steps):,}), RSS in proportion to the holdings, "
          "drop to the holdings per node;")
    print(f"  trend: a straight line through the {len(steps)} step(s), never better than the largest (pessimistic: "
          "cache misses level off)")
    print(f"  {'':36} {'scaled':>16}  {'trend':>16}   target")
    for projection in projections(steps):
        print(projection.row())
    print("  (CPU seconds of one core.  Lookups run without the lock; reports and drops hold it.)")


def run_locator(args: argparse.Namespace) -> None:
    """Fill the index step by step, measure each step, then extrapolate."""
    steps_at = sorted(set(args.holdings))
    print(f"== locator: HoldingsIndex in-process, {args.nodes:,} nodes, steps {', '.join(f'{n:,}' for n in steps_at)}"
          f"; lookups {args.lookups:,} LFNs per figure, batches of {args.batch}, {args.miss:.0%} unheld")
    print(f"   LFN example ({len(lfn(0))} chars): {lfn(0)}")
    baseline = rss_bytes()
    index = HoldingsIndex()
    steps: list[Step] = []
    filled = 0
    print_step_header()
    for target in steps_at:
        cpu = fill(index, filled, target, args.nodes)
        step = measure_step(index, target, args.nodes, baseline, cpu, target - filled, args)
        filled = target
        steps.append(step)
        print_step(step)
    print_locator_extrapolation(steps)


# -- pool ------------------------------------------------------------------------------------------------------------
@dataclass
class SimMember:
    """One simulated pool member: its heartbeat and whether it still sends."""

    name: str
    payload: dict[str, Any]
    active: bool = True


def sim_member(number: int) -> SimMember:
    """A cache-node member as a worker node would announce itself."""
    name = f"wn{number:04d}.pool.example.org"
    payload = {"name": name, "url": f"https://{name}:8443", "roles": ["cache"], "version": "bench",
               "started": time.time(),
               "info": {"cache": {"capacity_bytes": 2 * 10**12, "free_bytes": 5 * 10**11,
                                  "used_bytes": 15 * 10**11, "files": 10_000, "staging": 0}}}
    return SimMember(name, payload)


@dataclass
class BeatStats:
    """What the senders saw while ``recording``; shared by every sender thread."""

    size_every: int = 20  # re-encode one answer in this many to measure its size (it costs this process CPU)
    recording: bool = False
    latencies: list[float] = field(default_factory=list)
    lags: list[float] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    min_listed: int | None = None
    errors: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def reset(self) -> None:
        with self.lock:
            self.latencies, self.lags, self.sizes, self.min_listed, self.errors = [], [], [], None, 0

    def record(self, latency: float, lag: float, answer: dict[str, Any]) -> None:
        if not self.recording:
            return
        listed = len(answer.get("members", []))
        with self.lock:
            self.latencies.append(latency)
            self.lags.append(lag)
            self.min_listed = listed if self.min_listed is None else min(self.min_listed, listed)
            measure = len(self.latencies) % self.size_every == 1
        if measure:
            encoded = len(json.dumps(answer, separators=(",", ":"), allow_nan=False).encode())
            with self.lock:
                self.sizes.append(encoded)

    def error(self) -> None:
        if self.recording:
            with self.lock:
                self.errors += 1


class Sender(threading.Thread):
    """Heartbeats for many members over one signed client, each member on its own schedule."""

    def __init__(self, url: str, interval: float, stats: BeatStats, stop: threading.Event):
        super().__init__(daemon=True, name="sim-sender")
        self.url, self.interval, self.stats, self.halt = url, interval, stats, stop
        self.client = Client(SECRET.encode(), timeout=max(1.0, interval), retries=0)
        self.inbox: queue.SimpleQueue[tuple[float, SimMember]] = queue.SimpleQueue()
        self._heap: list[tuple[float, int, SimMember]] = []
        self._order = itertools.count()

    def add(self, member: SimMember, first_due: float) -> None:
        """Start heartbeating for ``member`` at monotonic time ``first_due`` (thread-safe)."""
        self.inbox.put((first_due, member))

    def run(self) -> None:
        while not self.halt.is_set():
            while not self.inbox.empty():
                due, member = self.inbox.get()
                heapq.heappush(self._heap, (due, next(self._order), member))
            if not self._heap:
                self.halt.wait(0.02)
                continue
            due = self._heap[0][0]
            delay = due - time.monotonic()
            if delay > 0:
                self.halt.wait(min(delay, 0.02))
                continue
            _, _, member = heapq.heappop(self._heap)
            if member.active:
                self.beat(member, due)
                heapq.heappush(self._heap, (due + self.interval, next(self._order), member))
        self.client.close()

    def beat(self, member: SimMember, due: float) -> None:
        lag = time.monotonic() - due
        started = time.perf_counter()
        try:
            answer = self.client.post(self.url + paths.HEARTBEAT, member.payload, idempotent=True)
        except ClientError:
            self.stats.error()
            return
        self.stats.record(time.perf_counter() - started, lag, answer)


class Simulation:
    """``threads`` senders sharing the simulated members round-robin."""

    def __init__(self, url: str, interval: float, threads: int):
        self.interval = interval
        self.stats = BeatStats()
        self._stop = threading.Event()
        self.senders = [Sender(url, interval, self.stats, self._stop) for _ in range(threads)]
        self.members: list[SimMember] = []

    def start(self) -> None:
        for sender in self.senders:
            sender.start()

    def join_members(self, members: list[SimMember], spread: float, rng: random.Random) -> None:
        """Start ``members``: each sends first at a random time within ``spread`` seconds from now."""
        now = time.monotonic()
        for member in members:
            self.senders[len(self.members) % len(self.senders)].add(member, now + rng.random() * spread)
            self.members.append(member)

    def stop(self) -> None:
        self._stop.set()
        for sender in self.senders:
            sender.join(10)


@dataclass
class Window:
    """The steady-state figures of one measuring window."""

    seconds: float
    latencies: list[float]
    lags: list[float]
    sizes: list[int]
    min_listed: int | None
    errors: int
    seed_cpu_pct: float
    sim_cpu_pct: float
    seed_rss_mb: float
    handler_ms: float  # mean wall time in the seed's heartbeat handler


HEARTBEAT_ROUTE = f'route="{paths.HEARTBEAT}"'  # the label of the seed's heartbeat route in /metrics


def handler_totals(seed: NodeProcess) -> tuple[float, float]:
    """(heartbeats served, seconds spent serving them) from the seed's Prometheus ``/metrics``."""
    served = seconds = 0.0
    try:
        text = seed.client.text(f"{seed.url}/metrics")
    except ClientError:
        return served, seconds
    for line in text.splitlines():
        if HEARTBEAT_ROUTE not in line:
            continue
        if line.startswith("htda_http_requests_total"):
            served += float(line.rsplit(" ", 1)[1])
        elif line.startswith("htda_http_request_seconds_total"):
            seconds += float(line.rsplit(" ", 1)[1])
    return served, seconds


def measure_window(seed: NodeProcess, sim: Simulation, seconds: float) -> Window:
    """Record heartbeats for ``seconds`` and sample the seed's CPU, memory and handler time around them."""
    assert seed.proc is not None
    sim.stats.reset()
    served0, spent0 = handler_totals(seed)
    before: ProcSample | None = proc_sample(seed.proc.pid)
    sim_cpu, started = time.process_time(), time.monotonic()
    sim.stats.recording = True
    time.sleep(seconds)
    sim.stats.recording = False
    elapsed = time.monotonic() - started
    after = proc_sample(seed.proc.pid)
    served1, spent1 = handler_totals(seed)
    assert before is not None and after is not None, "the seed died"
    handler_ms = 1000 * (spent1 - spent0) / (served1 - served0) if served1 > served0 else float("nan")
    with sim.stats.lock:
        s = sim.stats
        return Window(elapsed, sorted(s.latencies), sorted(s.lags), list(s.sizes), s.min_listed, s.errors,
                      100 * (after.cpu - before.cpu) / (after.time - before.time),
                      100 * (time.process_time() - sim_cpu) / elapsed, after.rss / MB, handler_ms)


def poll_until(predicate: Callable[[], bool], timeout: float, step: float) -> float | None:
    """Seconds until ``predicate()`` held (checked every ``step``), None if not within ``timeout``."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        try:
            if predicate():
                return time.monotonic() - started
        except ClientError:
            pass  # a busy seed: ask again
        time.sleep(step)
    return None


def measure_vanish(seed: NodeProcess, sim: Simulation, count: int, timeout: float, step: float) -> float | None:
    """Stop ``count`` members at once; seconds until the seed lists none of them."""
    victims = sim.members[::max(1, len(sim.members) // count)][:count]
    names = {m.name for m in victims}
    for member in victims:
        member.active = False
    return poll_until(lambda: not names & seed.members(), timeout, step)


def measure_join(seed: NodeProcess, sim: Simulation, count: int, timeout: float, step: float) -> float | None:
    """Start ``count`` new members at once; seconds until the seed lists all of them."""
    first = len(sim.members)
    newcomers = [sim_member(first + i) for i in range(count)]
    names = {m.name for m in newcomers}
    sim.join_members(newcomers, 0.0, random.Random(0))
    return poll_until(lambda: names <= seed.members(), timeout, step)


def start_seed(directory: Path, interval: float, expiry: float) -> NodeProcess:
    """A real ``htda-node`` seed (running the locator, as a service node would) as a subprocess."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    config = write_config(directory, "seed", ["locator"], port, [url], interval=interval, expiry=expiry)
    return NodeProcess(config).start()


def run_pool(args: argparse.Namespace) -> None:
    """Start the seed and the members, measure a steady window, then churn."""
    expiry = args.expiry or 2 * args.interval
    churn = max(1, round(args.members * args.churn))
    step = min(0.25, args.interval / 20)
    print(f"== pool: 1 seed (htda-node subprocess) + {args.members:,} simulated members over {args.threads} "
          f"sender threads, heartbeat every {args.interval:g} s, expiry {expiry:g} s, window {args.seconds:g} s")
    with tempfile.TemporaryDirectory() as tmp:
        seed = start_seed(Path(tmp), args.interval, expiry)
        sim = Simulation(seed.url, args.interval, args.threads)
        try:
            assert seed.proc is not None
            idle = proc_sample(seed.proc.pid)
            sim.start()
            sim.join_members([sim_member(i) for i in range(args.members)], args.interval, random.Random(1))
            wait_until(lambda: len(seed.members()) >= args.members + 1, timeout=3 * args.interval + 30,
                       interval=step, what="the seed to list every simulated member")
            time.sleep(args.interval)  # one more round: every member on its own schedule
            window = measure_window(seed, sim, args.seconds)
            vanish = measure_vanish(seed, sim, churn, expiry + 3 * args.interval, step)
            joined = measure_join(seed, sim, churn, 5 * args.interval, step)
        finally:
            sim.stop()
            seed.stop()
    print_pool(args, expiry, churn, idle.rss / MB if idle else float("nan"), window, vanish, joined)


def print_pool(args: argparse.Namespace, expiry: float, churn: int, idle_mb: float, w: Window,
               vanish: float | None, joined: float | None) -> None:
    """The pool figures beside the targets."""
    ms = lambda values, p: percentile(values, p) * 1000
    p99 = ms(w.latencies, 0.99)
    answer = statistics.fmean(w.sizes) if w.sizes else float("nan")
    expected = args.members / args.interval
    print(f"heartbeats in the window         : {len(w.latencies):,} in {w.seconds:.1f} s = "
          f"{len(w.latencies) / w.seconds:,.1f}/s (schedule: {expected:,.1f}/s), {w.errors} failed")
    print(f"heartbeat latency ms p50 / p99   : {ms(w.latencies, 0.5):.1f} / {p99:.1f}   "
          f"target p99 < {TARGET_P99_MS:g} ms: {verdict(p99, TARGET_P99_MS, True)}")
    print(f"seed handler ms per heartbeat    : {w.handler_ms:.1f}   (mean wall time inside the seed, from /metrics)")
    print(f"sender lag ms p50 / p99          : {ms(w.lags, 0.5):.1f} / {ms(w.lags, 0.99):.1f}   "
          "(heartbeats sent late: slow answers or a busy simulator held a thread's members back)")
    print(f"answer size bytes                : {answer:,.0f} ({answer / (args.members + 1):,.0f} per member listed)")
    print(f"fewest members in an answer      : {w.min_listed} of {args.members + 1}   (fewer: a live member expired)")
    print(f"seed CPU % of one core           : {w.seed_cpu_pct:.1f}   target < {TARGET_CPU_PCT:g} %: "
          f"{verdict(w.seed_cpu_pct, TARGET_CPU_PCT, True)}")
    beats = len(w.latencies) / w.seconds
    per_beat = w.seed_cpu_pct * 10 / beats if beats else float("nan")  # % of a core per beat/s -> ms per beat
    print(f"seed CPU ms per heartbeat        : {per_beat:.2f}   (grows with the members listed in each answer)")
    print(f"seed RSS MB idle / loaded        : {idle_mb:.1f} / {w.seed_rss_mb:.1f}")
    print(f"simulator CPU % (this process)   : {w.sim_cpu_pct:.1f}")
    beyond = f"{vanish - expiry:+.2f} s" if vanish is not None else "?"
    note = f"its floor is the expiry, {expiry:g} s: {beyond}"
    if expiry >= 2 * args.interval:
        note += "; only an expiry under two intervals can meet this"
    print_convergence("vanish", churn, vanish, args.interval, note)
    print_convergence("join", churn, joined, args.interval, "")
    if args.members != TARGET_MEMBERS or args.interval != TARGET_INTERVAL:
        # Each answer lists every member, so a heartbeat costs between a constant (CPU ~ members/interval)
        # and an amount proportional to the members (CPU ~ members^2/interval).
        rate = (TARGET_MEMBERS / args.members) * (args.interval / TARGET_INTERVAL)
        low, high = w.seed_cpu_pct * rate, w.seed_cpu_pct * rate * TARGET_MEMBERS / args.members
        print(f"seed CPU at {TARGET_MEMBERS:,} members every {TARGET_INTERVAL:g} s: {min(low, high):.0f}-"
              f"{max(low, high):.0f} % (EXTRAPOLATED, ~members/interval to ~members^2/interval; not measured)")


def print_convergence(what: str, count: int, seconds: float | None, interval: float, note: str) -> None:
    limit = 2 * interval
    label = f"converged, {count:,} {what} at once"
    if seconds is None:
        print(f"{label:33}: not within the timeout   target <= {limit:g} s (2 intervals): misses")
        return
    extra = f"   ({note})" if note else ""
    print(f"{label:33}: {seconds:.2f} s = {seconds / interval:.2f} intervals   target <= {limit:g} s: "
          f"{verdict(seconds, limit, True)}{extra}")


# -- failover ------------------------------------------------------------------------------------------------------
POSTGRES = "postgresql://postgres@127.0.0.1:5432/test"


@dataclass
class JobSender:
    """Posts job batches to the first coordinator that takes them; records what was acknowledged and when."""

    coordinators: list[NodeProcess]
    batch: int
    acked: list[tuple[float, int]] = field(default_factory=list)  # (time, jobs in the batch)
    ids: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        n = 0
        while not self.stop.is_set():
            lfns = [f"/store/failover/f{(n + i) % 5000}" for i in range(self.batch)]
            jobs = [{"job_id": f"failover#{n + i}.0", "owner": "alice", "inputs": [lfn], "sizes": {lfn: 1 << 20}}
                    for i, lfn in enumerate(lfns)]
            for node in self.coordinators:
                try:
                    node.post("/api/v1/coordinator/jobs", {"jobs": jobs})
                except ClientError:
                    continue
                self.acked.append((time.monotonic(), len(jobs)))
                self.ids += [j["job_id"] for j in jobs]
                n += self.batch
                break
            else:
                time.sleep(0.01)


def run_failover(args: argparse.Namespace) -> None:
    """Two coordinators on one database; kill -9 the leader under load; what the standby took over."""
    import sqlalchemy as sa

    url = args.database or POSTGRES
    postgres = url.startswith("postgresql")
    schema = f"htda_failover_{os.getpid()}" if postgres else ""
    print(f"== failover: two coordinators on {url.split('@')[-1]} (schema {schema}), batches of {args.batch_jobs} "
          f"jobs, leader killed after {args.before:g} s")
    with tempfile.TemporaryDirectory() as tmp:
        ports = [free_port(), free_port()]
        seeds = [f"http://127.0.0.1:{port}" for port in ports]
        section = {"coordinator": {"database": url, "db_schema": schema, "takeover_poll": args.takeover_poll}}
        nodes = [NodeProcess(write_config(Path(tmp), name, ["coordinator"], port, seeds, sections=section)).start()
                 for name, port in zip(("leader", "standby"), ports)]
        sender = JobSender(nodes, args.batch_jobs)
        thread = threading.Thread(target=sender.run, name="failover-sender")
        try:
            thread.start()
            time.sleep(args.before)
            nodes[0].kill()
            killed = time.monotonic()
            before = sum(n for t, n in sender.acked if t <= killed)
            took = poll_until(lambda: nodes[1].get("/api/v1/node")["roles"] == ["coordinator"], 60, 0.02)
            time.sleep(args.after)
            sender.stop.set()
            thread.join(30)
            after = [t for t, _ in sender.acked if t > killed]
            gap = (after[0] - killed) if after else None
            table = f'"{schema}".htda_jobs' if schema else "htda_jobs"
            with sa.create_engine(with_driver(url)).connect() as conn:
                stored = {row[0] for row in conn.execute(sa.text(f"SELECT job_id FROM {table}"))}
        finally:
            sender.stop.set()
            for node in nodes:
                node.stop()
    if postgres:
        with sa.create_engine(with_driver(url)).begin() as conn:
            conn.execute(sa.text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
    lost = len(set(sender.ids) - stored)
    print(f"jobs acknowledged before the kill : {before:,}")
    print(f"jobs acknowledged after it       : {sum(n for t, n in sender.acked if t > killed):,} in {args.after:g} s")
    print(f"takeover (kill -> standby leads)  : {'not within 60 s' if took is None else f'{took:.2f} s'}   "
          f"(up to the standby's takeover_poll, {args.takeover_poll:g} s, plus loading the database)")
    print(f"sender's gap (kill -> next ack)   : {'none acknowledged' if gap is None else f'{gap:.2f} s'}")
    print(f"acknowledged jobs not in the db   : {lost}   target 0: {verdict(lost, 0, True)}")


# -- command line ----------------------------------------------------------------------------------------------------
def holdings_list(text: str) -> list[int]:
    """'100000,300000,1e6' -> [100000, 300000, 1000000]."""
    return [int(float(part)) for part in text.split(",") if part.strip()]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", action="append", choices=["locator", "pool", "failover", "coordinator"],
                        help="run only this part (repeatable; default: locator and pool)")
    parser.add_argument("--quick", action="store_true", help="small sizes: both parts in under a minute")
    loc = parser.add_argument_group("locator")
    loc.add_argument("--holdings", type=holdings_list, help="fill levels, comma-separated (100000,300000,1000000)")
    loc.add_argument("--nodes", type=int, help="nodes the holdings are spread over (1000)")
    loc.add_argument("--lookups", type=int, help="LFNs looked up for each lookup figure (100000)")
    loc.add_argument("--batch", type=int, default=100, help="LFNs per batch lookup (100)")
    loc.add_argument("--repeat", type=int, default=3, help="lookup figures are the median of this many runs (3)")
    loc.add_argument("--miss", type=float, default=0.1, help="fraction of looked-up LFNs nobody holds (0.1)")
    pool = parser.add_argument_group("pool")
    pool.add_argument("--members", type=int, help="simulated members (1000)")
    pool.add_argument("--interval", type=float, help="heartbeat interval, seconds (10)")
    pool.add_argument("--seconds", type=float, help="length of the measuring window (60)")
    pool.add_argument("--expiry", type=float, help="the seed's expiry, seconds (default: two intervals)")
    pool.add_argument("--threads", type=int, default=16, help="sender threads in this process (16, as the seed's "
                      "REST threads)")
    pool.add_argument("--churn", type=float, default=0.1, help="fraction of members that vanish, then join (0.1)")
    ha = parser.add_argument_group("failover")
    ha.add_argument("--database", help="SQLAlchemy URL both coordinators use (default: the local PostgreSQL)")
    ha.add_argument("--batch-jobs", type=int, default=100, help="job records per request (100)")
    ha.add_argument("--before", type=float, default=5.0, help="seconds of load before the kill (5)")
    ha.add_argument("--after", type=float, default=5.0, help="seconds of load after the takeover (5)")
    ha.add_argument("--takeover-poll", type=float, default=2.0, help="the coordinators' takeover_poll (2, the "
                    "default)")
    coord = parser.add_argument_group("coordinator (bench/scale_coordinator.py)")
    coord.add_argument("--files", type=holdings_list, default=[1_000_000, 3_000_000],
                       help="sizes in files, comma-separated (1000000,3000000; the issue's size is 1e7)")
    coord.add_argument("--files-per-group", type=int, default=5, help="files per job group (5: 10M files, 2M groups)")
    coord.add_argument("--cached", type=float, default=0.1, help="share of the bytes the cache nodes can hold (0.1)")
    coord.add_argument("--incremental", type=int, default=1000, help="new jobs before the incremental cycle (1000)")
    coord.add_argument("--ingest", type=int, default=100_000, help="jobs posted through REST for the ingest rate")
    coord.add_argument("--ingest-batch", type=int, default=1000, help="jobs per request in the ingest (1000)")
    coord.add_argument("--ingest-sizes", action="store_true",
                       help="the ingested jobs name their inputs' sizes, as the submit agent sends them")
    args = parser.parse_args(argv)
    for name, (full, quick) in DEFAULTS.items():
        if getattr(args, name) is None:
            setattr(args, name, quick if args.quick else full)
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    parts = args.part or ["locator", "pool"]
    if "locator" in parts:
        run_locator(args)
    if "pool" in parts:
        if "locator" in parts:
            print()
        run_pool(args)
    if "failover" in parts:
        run_failover(args)
    if "coordinator" in parts:
        from scale_coordinator import run_coordinator  # beside this file: numpy and PostgreSQL only for this part

        run_coordinator(args, verdict)


if __name__ == "__main__":
    main()

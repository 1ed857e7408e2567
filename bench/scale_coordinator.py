"""The coordinator part of ``bench/scale.py``: millions of files on PostgreSQL (issue 18).

For each size in ``--files`` (default 1M and 3M; 10M with ``--files 1e7``):

1. a fresh PostgreSQL schema is made by the coordinator's own migrations and
   filled straight through ``COPY`` (no REST): ``files`` files of 1-3 GB in
   groups of ``--files-per-group`` (a job's inputs), and ``files`` jobs,
   each reading one group picked with a skewed popularity, submitted over
   the last 30 days: ``files * files-per-group`` file accesses (10M files,
   2M groups, 50M accesses at the issue's size);
2. one ``htda-node`` with the coordinator starts on it (a subprocess): the
   time until it serves (the full rating rebuilt from the database) and its
   RSS once loaded;
3. four simulated cache nodes heartbeat with room for ``--cached`` of the
   bytes; a full cycle, then three times ``--incremental`` new jobs through REST and an
   incremental cycle (their times from the cycle reports; the slowest is the figure);
4. ``--ingest`` jobs through REST in batches of ``--batch`` (signed, PycURL):
   the bulk ingest rate on top of that history; then the RSS again, and the
   database's size.  With ``--ingest-sizes`` each job names its inputs'
   sizes (the ones the history has), as the submit agent does where it sees
   the storage; the history's groups carry the sizes digest that an ingest
   of such jobs writes.

Printed per size, then the growth from size to size per file (RSS, DB
bytes), beside the targets: ingest >= 5,000 jobs/s, incremental cycle <= 5 s,
restart to serving <= 5 min, RSS <= 2 GB at 10M files.
"""

from __future__ import annotations

import io
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import sqlalchemy as sa

from bench.coordinator_bench import CACHE_NODES, CacheMembers
from htda.coordinator.store import Store, file_key, group_name, sizes_digest, with_driver
from htda.node.client import Client
from testkit.nodes import SECRET, NodeProcess, free_port, write_config

BASE = "/api/v1/coordinator"
MB = 1 << 20
DAY = 86400.0
TARGET_INGEST = 5_000
TARGET_INCREMENTAL = 5.0
TARGET_RESTART = 300.0
TARGET_RSS_MB = 2048
INCREMENTAL_ROUNDS = 3


@dataclass
class SizeResult:
    """What one size measured."""

    files: int
    groups: int
    jobs: int
    load_seconds: float
    restart_seconds: float
    rebuild_seconds: float
    rss_loaded_mb: float
    full_cycle: float
    incremental_cycle: float
    ingest_rate: float
    rss_after_mb: float
    peak_mb: float
    db_bytes: int


def lfn(i: int) -> str:
    return f"/store/data/Run2026{'ABCD'[i % 4]}/ds{i // 50_000}/NANOAOD/v1/{i // 1000:05d}/f{i:09d}.root"


def inputs(group: int, per_group: int) -> list[str]:
    """The LFNs of group ``group`` (a job's inputs): ``per_group`` consecutive files."""
    return [lfn(group * per_group + k) for k in range(per_group)]


def _copy(cursor, table: str, columns: str, rows: Iterator[str], chunk: int = 200_000) -> None:
    """COPY text rows (tab-separated, newline-ended) into ``table`` in chunks."""
    buf, n = io.StringIO(), 0
    for row in rows:
        buf.write(row)
        n += 1
        if n == chunk:
            buf.seek(0)
            cursor.copy_expert(f"COPY {table} ({columns}) FROM STDIN", buf)
            buf, n = io.StringIO(), 0
    if n:
        buf.seek(0)
        cursor.copy_expert(f"COPY {table} ({columns}) FROM STDIN", buf)


def load_history(url: str, schema: str, files: int, per_group: int, seed: int = 1) -> tuple[int, int, float]:
    """Fill a fresh schema; return (groups, jobs, seconds)."""
    started = time.perf_counter()
    Store(url, schema).close()  # the coordinator's own migrations make the tables
    groups, jobs = files // per_group, files
    rng = np.random.default_rng(seed)
    sizes = _draw_sizes(rng, files)
    # a skewed popularity: group ranks drawn as groups * u^3 (the first 10 % of groups take ~46 % of the jobs)
    chosen = np.minimum((groups * rng.random(jobs) ** 3).astype(np.int64), groups - 1)
    now = time.time()
    times = np.sort(now - 30 * DAY * rng.random(jobs))
    engine = sa.create_engine(with_driver(url))
    raw = engine.raw_connection()
    try:
        cur = raw.cursor()
        cur.execute(f'SET search_path TO "{schema}"')
        _copy(cur, "htda_files", "id, key, lfn, size",
              (f"{i + 1}\t{file_key(lfn(i))}\t{lfn(i)}\t{sizes[i]}\n" for i in range(files)))
        # each group's sizes digest as an ingest of its jobs with their sizes would have written it
        _copy(cur, "htda_groups", "id, name, kind, sizes_digest",
              (f"{g + 1}\t{group_name(sized)}\tjob\t{sizes_digest(sized, sized)}\n"
               for g in range(groups) for sized in [input_sizes(g, per_group, sizes)]))
        _copy(cur, "htda_group_files", "group_id, file_id",
              (f"{i // per_group + 1}\t{i + 1}\n" for i in range(groups * per_group)))
        _copy(cur, "htda_jobs", "id, job_id, owner, submit_time, state, input_group_id",
              (f"{j + 1}\tscale#{j}.0\tuser{j % 97}\t{times[j]:.3f}\tsubmitted\t{chosen[j] + 1}\n"
               for j in range(jobs)))
        for table in ("htda_files", "htda_groups", "htda_jobs"):
            cur.execute(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), (SELECT max(id) FROM {table}))")
        cur.execute("ANALYZE")
        raw.commit()
    finally:
        raw.close()
        engine.dispose()
    return groups, jobs, time.perf_counter() - started


def proc_mb(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of a process in MB."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def _draw_sizes(rng: np.random.Generator, files: int) -> np.ndarray:
    return rng.integers(1 << 30, 3 << 30, size=files)


def history_sizes(files: int, seed: int = 1) -> np.ndarray:
    """The sizes :func:`load_history` gives the files (index i: ``lfn(i)``): its generator's first draw."""
    return _draw_sizes(np.random.default_rng(seed), files)


def input_sizes(group: int, per_group: int, sizes: np.ndarray) -> dict[str, int]:
    """The inputs of group ``group`` (as :func:`inputs`) with their sizes."""
    first = group * per_group
    return {lfn(i): int(sizes[i]) for i in range(first, first + per_group)}


def new_jobs(first: int, count: int, groups: int, per_group: int, sizes: np.ndarray | None = None) -> list[dict]:
    """``count`` new jobs (ids from ``first``) reading existing groups, submitted now; with ``sizes``, each
    names its inputs' sizes, as the submit agent does where it sees the storage."""
    now = time.time()
    out = []
    for j in range(first, first + count):
        group = (j * 7919) % groups
        job = {"job_id": f"scale#{j}.0", "owner": "bench", "inputs": inputs(group, per_group), "submit_time": now}
        if sizes is not None:
            job["sizes"] = input_sizes(group, per_group, sizes)
        out.append(job)
    return out


def measure_size(url: str, schema: str, files: int, args, tmp: Path) -> SizeResult:
    groups, jobs, load_seconds = load_history(url, schema, files, args.files_per_group)
    print(f"  loaded {files:,} files, {groups:,} groups, {jobs:,} jobs "
          f"({jobs * args.files_per_group:,} accesses) in {load_seconds:.0f} s")
    port = free_port()
    section = {"coordinator": {"database": url, "db_schema": schema, "cycle": 3600.0, "takeover_poll": 3600.0,
                               "max_batch": max(args.ingest_batch, 100_000)}}
    config = write_config(tmp / schema, "coordinator", ["coordinator"], port, [f"http://127.0.0.1:{port}"],
                          sections=section, interval=1.0, expiry=600.0)
    node = NodeProcess(config)
    started = time.monotonic()
    node.start(timeout=3600)
    restart = time.monotonic() - started
    assert node.proc is not None
    rss_loaded, _ = proc_mb(node.proc.pid)
    rebuild = _rebuild_seconds(node.log)
    client = Client(SECRET.encode(), timeout=3600, retries=0)
    beats = CacheMembers(client, node.url, int(args.cached * files * 2 * (1 << 30)) // CACHE_NODES)
    try:
        beats.beat()
        beats.start()
        full = client.post(node.url + BASE + "/cycle", {"full": True}, timeout=3600)["cycle"]["seconds"]
        incremental = []
        for k in range(INCREMENTAL_ROUNDS):  # the largest of a few: one cycle may run beside a GC or a checkpoint
            client.post(node.url + BASE + "/jobs", {"jobs": new_jobs(jobs + k * args.incremental, args.incremental,
                                                                       groups, args.files_per_group)}, timeout=600)
            incremental.append(client.post(node.url + BASE + "/cycle", {}, timeout=3600)["cycle"]["seconds"])
        print(f"  incremental cycles ({args.incremental:,} new jobs before each): "
              + ", ".join(f"{s:.2f}" for s in incremental) + " s")
        first = jobs + INCREMENTAL_ROUNDS * args.incremental
        known_sizes = history_sizes(files) if args.ingest_sizes else None
        t0 = time.perf_counter()
        for start in range(first, first + args.ingest, args.ingest_batch):
            count = min(args.ingest_batch, first + args.ingest - start)
            client.post(node.url + BASE + "/jobs", {"jobs": new_jobs(start, count, groups, args.files_per_group,
                                                                     known_sizes)},
                        timeout=600)
        rate = args.ingest / (time.perf_counter() - t0)
        rss_after, peak = proc_mb(node.proc.pid)
    finally:
        beats.stop.set()
        node.stop()
        client.close()
    engine = sa.create_engine(with_driver(url))
    with engine.begin() as conn:
        db_bytes = conn.execute(sa.text(
            "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = :s AND c.relkind = 'r'"), {"s": schema}).scalar() or 0
        conn.execute(sa.text(f'DROP SCHEMA "{schema}" CASCADE'))
    engine.dispose()
    return SizeResult(files, groups, jobs, load_seconds, restart, rebuild, rss_loaded, full, max(incremental), rate,
                      rss_after, peak, int(db_bytes))


def _rebuild_seconds(log: Path) -> float:
    found = re.findall(r"rebuilt the rating of \d+ groups and \d+ files from .* in ([0-9.]+) s", log.read_text())
    return float(found[-1]) if found else float("nan")


def print_results(results: list[SizeResult], verdict) -> None:
    print()
    print(f"{'files':>12} {'groups':>10} {'accesses':>12} {'restart s':>10} {'rebuild s':>10} {'RSS MB':>8} "
          f"{'B/file':>7} {'full cyc s':>10} {'incr cyc s':>10} {'ingest/s':>9} {'peak MB':>8} {'DB MB':>8}")
    for r in results:
        print(f"{r.files:>12,} {r.groups:>10,} {r.jobs * (r.files // r.groups):>12,} {r.restart_seconds:>10.1f} "
              f"{r.rebuild_seconds:>10.1f} {r.rss_loaded_mb:>8.0f} {r.rss_loaded_mb * MB / r.files:>7.0f} "
              f"{r.full_cycle:>10.2f} {r.incremental_cycle:>10.2f} {r.ingest_rate:>9,.0f} {r.peak_mb:>8.0f} "
              f"{r.db_bytes / MB:>8.0f}")
    if len(results) >= 2:
        a, b = results[-2], results[-1]
        per_file = (b.rss_loaded_mb - a.rss_loaded_mb) * MB / (b.files - a.files)
        db_per_file = (b.db_bytes - a.db_bytes) / (b.files - a.files)
        at_10m = b.rss_loaded_mb + per_file * (10_000_000 - b.files) / MB
        print(f"growth {a.files:,} -> {b.files:,} files: {per_file:.0f} B of RSS and {db_per_file:.0f} B of "
              f"database per file (with its {a.jobs / a.files:.0f} job(s) and 1/{a.files // a.groups} group)")
        print(f"RSS at 10M files (EXTRAPOLATED along that growth): {at_10m:,.0f} MB   target <= {TARGET_RSS_MB} MB: "
              f"{verdict(at_10m, TARGET_RSS_MB, True)}")
    last = results[-1]
    print(f"at {last.files:,} files: ingest {last.ingest_rate:,.0f} jobs/s (target >= {TARGET_INGEST:,}: "
          f"{verdict(last.ingest_rate, TARGET_INGEST, False)}), incremental cycle {last.incremental_cycle:.2f} s "
          f"(target <= {TARGET_INCREMENTAL:g}: {verdict(last.incremental_cycle, TARGET_INCREMENTAL, True)}), "
          f"restart {last.restart_seconds:.0f} s (target <= {TARGET_RESTART:g}: "
          f"{verdict(last.restart_seconds, TARGET_RESTART, True)})")


def run_coordinator(args, verdict) -> None:
    """Every size of ``args.files`` in turn, then the growth."""
    import os
    import tempfile

    url = args.database or "postgresql://postgres@127.0.0.1:5432/test"
    print(f"== coordinator: PostgreSQL ({url.split('@')[-1]}), sizes {', '.join(f'{f:,}' for f in args.files)} "
          f"files, {args.files_per_group} per group, one job per file; {args.cached:.0%} of the bytes fit the "
          f"cache; REST ingest of {args.ingest:,} jobs in batches of {args.ingest_batch:,}"
          + (", each naming its inputs' sizes" if args.ingest_sizes else ""))
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for files in args.files:
            schema = f"htda_scale_{os.getpid()}_{files}"
            print(f"-- {files:,} files")
            results.append(measure_size(url, schema, files, args, Path(tmp)))
    print_results(results, verdict)

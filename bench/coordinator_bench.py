"""Coordinator benchmark: bulk ingest through REST, full and incremental work cycles, resident memory.

One real ``htda-node`` running the coordinator (SQLite in a temporary
folder) is started as a subprocess.  This process plays the hooks and the
cache nodes:

1. it posts the job records and then their ``started`` events through the
   REST endpoints in bulk (``--batch`` per request, signed, PycURL) — jobs
   of ``--groups`` input groups of ``--files-per-group`` files, picked with
   a Zipf-like popularity, so that the starts make ``--accesses`` file
   accesses in all;
2. it heartbeats as four cache nodes holding a quarter of the data (from the
   start) and asks for a work cycle (``POST /cycle``; the periodic cycle is
   set to an hour so that none runs in between): every group re-keyed,
   everything placed;
3. it restarts the node: the rebuild from the database is the full rating
   (the whole history replayed), followed by a cycle that must move nothing,
   and one more (the steady cycle: nothing new);
4. it posts ``--incremental`` new job starts and asks for a cycle: the
   incremental cycle;
5. it reads the node's resident memory (now and peak).

Targets: ingest >= 2,000 jobs/s, incremental cycle < 1 s, RSS < 300 MB.

    python bench/coordinator_bench.py            # quick: 50,000 accesses, well under a minute
    python bench/coordinator_bench.py --full     # 1,000,000 accesses, 200,000 files, 50,000 groups
"""

from __future__ import annotations

import argparse
import random
import re
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout: testkit/ is not installed

from htda.node.client import Client  # noqa: E402
from htda.protocol import paths  # noqa: E402
from testkit.nodes import SECRET, NodeProcess, free_port, wait_until, write_config  # noqa: E402

BASE = paths.COORDINATOR
CACHE_NODES = 4


def proc_status(pid: int) -> dict[str, float]:
    """VmRSS and VmHWM (peak) of a process, in MB."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0]) / 1024
    return out


class Workload:
    """Groups of files with sizes, and jobs that read one group each (Zipf-like popularity)."""

    def __init__(self, groups: int, files_per_group: int, accesses: int, seed: int = 1):
        self.rng = random.Random(seed)
        self.groups = [[f"/store/data/ds{g // 100}/g{g}/f{i}.root" for i in range(files_per_group)]
                       for g in range(groups)]
        self.sizes = {lfn: self.rng.randint(100, 3000) << 20 for files in self.groups for lfn in files}
        self.weights = [1.0 / (rank + 1) ** 0.8 for rank in range(groups)]
        self.jobs = accesses // files_per_group
        self.t0 = time.time() - 30 * 86400
        self.span = 29 * 86400

    def job(self, number: int, group: int, t: float) -> tuple[dict, dict]:
        inputs = self.groups[group]
        record = {"job_id": f"bench#{number}", "owner": f"user{group % 37}", "inputs": inputs, "cpus": 1,
                  "memory": 2000, "submit_time": t - 60, "sizes": {lfn: self.sizes[lfn] for lfn in inputs}}
        return record, {"job_id": record["job_id"], "state": "started", "time": t, "node": f"worker{number % 50}"}

    def batches(self, batch: int, start: int = 0, count: int | None = None, t_start: float | None = None):
        count = self.jobs if count is None else count
        t_start = self.t0 if t_start is None else t_start
        for first in range(start, start + count, batch):
            n = min(batch, start + count - first)
            groups = self.rng.choices(range(len(self.groups)), weights=self.weights, k=n)
            pairs = [self.job(first + i, g, t_start + (first + i - start) * self.span / count)
                     for i, g in enumerate(groups)]
            yield [p[0] for p in pairs], [p[1] for p in pairs]


def post_all(client: Client, url: str, batches) -> tuple[int, float, float]:
    """Post every batch of jobs then of events; return (jobs, seconds for jobs, seconds for events)."""
    jobs = 0
    t_jobs = t_events = 0.0
    for records, events in batches:
        started = time.perf_counter()
        answer = client.post(url + "/jobs", {"jobs": records})
        t_jobs += time.perf_counter() - started
        assert answer["accepted"] == len(records), answer
        started = time.perf_counter()
        answer = client.post(url + "/events", {"events": events})
        t_events += time.perf_counter() - started
        assert answer["accepted"] == len(events), answer
        jobs += len(records)
    return jobs, t_jobs, t_events


class CacheMembers(threading.Thread):
    """Heartbeats as cache nodes with a capacity, as real cache nodes would."""

    def __init__(self, client: Client, url: str, capacity: int):
        super().__init__(daemon=True)
        self.client, self.url, self.capacity = client, url, capacity
        self.stop = threading.Event()

    def beat(self) -> None:
        for i in range(CACHE_NODES):
            self.client.post(self.url + paths.HEARTBEAT, {
                "name": f"cache{i}", "url": f"http://127.0.0.1:9/cache{i}", "roles": ["cache"], "version": "bench",
                "started": 1.0, "info": {"cache": {"capacity_bytes": self.capacity, "free_bytes": self.capacity,
                                                   "used_bytes": 0, "files": 0, "staging": 0}}})

    def run(self) -> None:
        while not self.stop.wait(1.0):
            try:
                self.beat()
            except Exception as exc:  # noqa: BLE001 - a bench helper: report and keep beating
                print(f"heartbeat failed: {exc}")


def wait_for_cycle(client: Client, url: str, after: int, timeout: float) -> dict:
    def done():
        later = [r for r in client.get(url + "/nodes")["recent_cycles"] if r["cycle"] > after]
        return later[0] if later else None

    return wait_until(done, timeout=timeout, interval=0.2, what=f"a work cycle after cycle {after}")


def run_cycle(client: Client, url: str, full: bool = False) -> dict:
    """A work cycle now, through the admin endpoint; its report."""
    report = client.post(url + "/cycle", {"full": True} if full else {})["cycle"]
    assert report is not None, "no live cache node"
    return report


def rebuild_seconds(log: Path) -> float:
    found = re.findall(r"rebuilt the rating of \d+ groups and \d+ files from .* in ([0-9.]+) s", log.read_text())
    return float(found[-1]) if found else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="1,000,000 accesses over 200,000 files in 50,000 groups")
    parser.add_argument("--accesses", type=int, default=0, help="file accesses (default 50,000; --full 1,000,000)")
    parser.add_argument("--groups", type=int, default=0, help="groups (default 2,500; --full 50,000)")
    parser.add_argument("--files-per-group", type=int, default=4)
    parser.add_argument("--batch", type=int, default=5000, help="jobs per request")
    parser.add_argument("--incremental", type=int, default=1000, help="new job starts before the incremental cycle")
    args = parser.parse_args()
    accesses = args.accesses or (1_000_000 if args.full else 50_000)
    groups = args.groups or (50_000 if args.full else 2_500)
    work = Workload(groups, args.files_per_group, accesses)
    total_bytes = sum(work.sizes.values())
    print(f"workload: {work.jobs:,} jobs, {accesses:,} accesses, {len(work.sizes):,} files in {groups:,} groups, "
          f"{total_bytes / 2**40:.1f} TiB; {CACHE_NODES} cache nodes holding a quarter of it")

    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        node_url = f"http://127.0.0.1:{port}"
        config = write_config(Path(tmp), "coord", ["coordinator"], port, [node_url], interval=1.0, expiry=30.0,
                              sections={"coordinator": {"cycle": 3600.0, "half_life": 7 * 86400.0,
                                                        "access_on": "start"},
                                        "node": {"threads": 4, "max_body": 256 << 20}})
        node = NodeProcess(config).start()
        client = Client(SECRET.encode(), timeout=600.0, retries=0)
        url = node_url + BASE
        try:
            members = CacheMembers(client, node_url, total_bytes // 4 // CACHE_NODES)
            members.beat()
            members.start()
            jobs, t_jobs, t_events = post_all(client, url, work.batches(args.batch))
            print(f"ingest: {jobs:,} jobs in {t_jobs:.1f} s = {jobs / t_jobs:,.0f} jobs/s (POST /jobs); "
                  f"their starts in {t_events:.1f} s = {jobs / t_events:,.0f} events/s (POST /events); "
                  f"both: {jobs / (t_jobs + t_events):,.0f} jobs/s")
            print(f"coordinator RSS after ingest: {proc_status(node.proc.pid)['VmRSS']:.0f} MB")

            first = run_cycle(client, url, full=True)
            print(f"full cycle after the ingest ({first['groups_rekeyed']:,} groups re-keyed, {first['placed']:,} "
                  f"files placed from {first['candidates']:,} candidate groups): {first['seconds']:.3f} s")

            node.stop()
            node = NodeProcess(config).start()
            members.beat()
            after_restart = wait_for_cycle(client, url, first["cycle"], timeout=600)
            print(f"restart: full rating rebuilt from the database in {rebuild_seconds(node.log):.2f} s; "
                  f"first cycle after it {after_restart['seconds']:.3f} s, moved {after_restart['moved']} files")

            steady = run_cycle(client, url)
            print(f"steady cycle (nothing new): {steady['seconds']:.3f} s, {steady['groups_rekeyed']} groups "
                  f"re-keyed, moved {steady['moved']}")

            post_all(client, url, work.batches(args.batch, start=work.jobs, count=args.incremental,
                                               t_start=time.time() - 60))
            incremental = run_cycle(client, url)
            print(f"incremental cycle ({args.incremental:,} new starts, {incremental['groups_rekeyed']:,} groups "
                  f"re-keyed, kind '{incremental['kind']}', moved {incremental['moved']}): "
                  f"{incremental['seconds']:.3f} s")
            full = run_cycle(client, url, full=True)
            print(f"a full placement right after it ({full['kind']}): {full['moved']} more files moved, "
                  f"{full['seconds']:.3f} s")
            status = proc_status(node.proc.pid)
            print(f"coordinator RSS: {status['VmRSS']:.0f} MB now, {status['VmHWM']:.0f} MB peak")
            members.stop.set()
        finally:
            node.stop()
            client.close()


if __name__ == "__main__":
    main()

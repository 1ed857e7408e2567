"""Load benchmark: job reports at a steady rate plus heartbeating members against a service node.

A real ``htda-node`` (coordinator + locator) runs as a subprocess.  This
process plays the submit side, signed through the PycURL client: job records
(``POST /api/v1/coordinator/jobs``, ``--batch`` jobs per request) at
``--rate`` jobs/s, then a "started" and a "finished" event for every
acknowledged job (``POST /api/v1/coordinator/events``, flushed every 0.2 s).
Meanwhile ``--members`` simulated cache nodes heartbeat to the node through
the runtime's own :class:`htda.node.pool.Pool`.  Afterwards every acknowledged
job is checked to be in the coordinator's database (re-submitting them must
give only duplicates) and the access counts of sampled files are compared
with the acknowledged "started" events.  Prints throughput, latencies,
errors, heartbeats, and the node's RSS and CPU.

    python bench/load_bench.py [--rate 500] [--seconds 60] [--members 50] [--batch 10]

The reliability tests (tests/ops) use the classes below with a shorter run.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import quote

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout: testkit/ is not installed

from htda.node.client import Client, ClientError, HTTPStatusError  # noqa: E402
from htda.node.pool import Member, Pool  # noqa: E402
from htda.protocol import paths  # noqa: E402
from testkit.nodes import SECRET, NodeProcess, free_port, write_config  # noqa: E402

API = paths.COORDINATOR


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class RssSampler:
    """Samples a process's resident memory every ``interval`` seconds (follows restarts via ``pid()``)."""

    def __init__(self, pid, interval: float = 0.5):
        self.pid, self.interval = pid, interval
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.samples.append(rss_mb(self.pid()))
            except (OSError, ValueError, AttributeError):
                continue  # the process is restarting

    def start(self) -> RssSampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


class JobReporter:
    """Reports jobs and their events to a coordinator at a steady rate, like the submit agents do.

    A batch that fails is kept and sent again (idempotent on job ids), so
    ``acked`` holds exactly the jobs the coordinator answered 2xx for, and
    ``started`` those whose "started" event it answered 2xx for.
    """

    def __init__(self, url: str, rate: float, batch: int = 1, senders: int = 4, files: int = 2000,
                 inputs: int = 3, run: str = "load", timeout: float = 5.0, seed: int = 1, size: int = 1 << 20):
        self.url, self.rate, self.batch, self.senders = url.rstrip("/"), rate, batch, senders
        self.run, self.inputs, self.timeout, self.size = run, inputs, timeout, size
        self.lfns = [f"/store/load/{run}/file{i:05d}.dat" for i in range(files)]
        self.rng_seed = seed
        self.jobs: dict[str, list[str]] = {}  # every job generated: id -> inputs
        self.acked: set[str] = set()
        self.started: set[str] = set()
        self.errors: Counter[str] = Counter()
        self.latencies: list[float] = []
        self.requests = 0
        self._pending_events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.began = self.ended = 0.0
        self._deadline = float("inf")

    # -- life cycle ----------------------------------------------------------------
    def start(self) -> JobReporter:
        self.began = time.monotonic()
        for i in range(self.senders):
            self._threads.append(threading.Thread(target=self._send_jobs, args=(i,), name=f"jobs-{i}", daemon=True))
        self._threads.append(threading.Thread(target=self._send_events, name="events", daemon=True))
        for thread in self._threads:
            thread.start()
        return self

    def stop(self, drain: float = 15.0) -> None:
        """Stop generating; keep sending what is pending for up to ``drain`` seconds."""
        self._deadline = time.monotonic() + drain
        self._stop.set()
        for thread in self._threads:
            thread.join(drain + self.timeout + 5)
        self.ended = time.monotonic()

    # -- senders ---------------------------------------------------------------------
    def _post(self, path: str, payload: dict[str, Any], client: Client) -> dict[str, Any] | None:
        t0 = time.perf_counter()
        try:
            answer = client.post(f"{self.url}{path}", payload, idempotent=False)
        except ClientError as exc:
            kind = f"HTTP {exc.status}" if isinstance(exc, HTTPStatusError) else type(exc).__name__
            with self._lock:
                self.errors[f"{path} {kind}"] += 1
            return None
        with self._lock:
            self.latencies.append(time.perf_counter() - t0)
            self.requests += 1
        return answer

    def _make_job(self, rng: random.Random, sender: int, n: int) -> dict[str, Any]:
        job_id = f"{self.run}-{sender}-{n}"
        task = n // 100
        # popular files first: a task reads a window of the file list, skewed to the front
        base = int(len(self.lfns) * rng.random() ** 2)
        inputs = [self.lfns[(base + task + k) % len(self.lfns)] for k in range(self.inputs)]
        with self._lock:
            self.jobs[job_id] = inputs
        return {"job_id": job_id, "owner": f"user{sender}", "inputs": inputs, "cpus": 1, "memory": 2000,
                "submit_time": time.time(), "task": f"schedd{sender}#{task}",
                "sizes": {lfn: self.size for lfn in inputs}}

    def _send_jobs(self, sender: int) -> None:
        client = Client(SECRET.encode(), timeout=self.timeout, retries=0)
        rng = random.Random(self.rng_seed * 1000 + sender)
        period = self.batch * self.senders / self.rate
        next_at, n = time.monotonic() + period * sender / self.senders, 0
        batch: list[dict[str, Any]] = []
        while True:
            if not batch:
                if self._stop.is_set():
                    break
                batch = [self._make_job(rng, sender, n + k) for k in range(self.batch)]
                n += self.batch
            delay = next_at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            next_at = max(next_at + period, time.monotonic() - 1.0)  # catch up, but never in a burst > 1 s
            if self._post(f"{API}/jobs", {"jobs": batch}, client) is not None:
                now = time.time()
                with self._lock:
                    self.acked.update(j["job_id"] for j in batch)
                    self._pending_events += [{"job_id": j["job_id"], "state": s, "time": now} for j in batch
                                             for s in ("started", "finished")]
                batch = []
            elif self._stop.is_set() and time.monotonic() > self._deadline:
                break
            else:
                time.sleep(0.2)
        client.close()

    def _send_events(self) -> None:
        client = Client(SECRET.encode(), timeout=self.timeout, retries=0)
        while True:
            stopping = self._stop.is_set()
            with self._lock:
                events, self._pending_events = self._pending_events[:20000], self._pending_events[20000:]
            if events:
                if self._post(f"{API}/events", {"events": events}, client) is not None:
                    with self._lock:
                        self.started.update(e["job_id"] for e in events if e["state"] == "started")
                else:
                    with self._lock:
                        self._pending_events[:0] = events
            elif stopping and all(not t.is_alive() for t in self._threads if t.name.startswith("jobs")):
                break
            if stopping and time.monotonic() > self._deadline:
                break
            time.sleep(0.2)
        client.close()

    # -- results ---------------------------------------------------------------------
    def summary(self) -> dict[str, Any]:
        elapsed = (self.ended or time.monotonic()) - self.began
        lat = sorted(self.latencies) or [0.0]
        pct = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))] * 1000
        return {"seconds": elapsed, "jobs_acked": len(self.acked), "jobs_per_s": len(self.acked) / elapsed,
                "started_acked": len(self.started), "requests": self.requests,
                "errors": sum(self.errors.values()), "error_kinds": dict(self.errors),
                "p50_ms": pct(0.5), "p99_ms": pct(0.99), "max_ms": lat[-1] * 1000}


def verify(url: str, reporter: JobReporter, sample: int = 40, timeout: float = 60.0) -> dict[str, Any]:
    """Check, through the coordinator's API, that nothing acknowledged was lost.

    Re-submitting every acknowledged job must give only duplicates; each
    sampled file must count at least the acknowledged "started" events of
    the jobs that read it (more is possible: a request can succeed after
    its client timed out).
    """
    client = Client(SECRET.encode(), timeout=timeout, retries=2)
    acked = sorted(reporter.acked)
    accepted = duplicates = 0
    for i in range(0, len(acked), 5000):
        chunk = [{"job_id": j, "owner": "verify", "inputs": reporter.jobs[j]} for j in acked[i:i + 5000]]
        answer = client.post(f"{url}{API}/jobs", {"jobs": chunk})
        accepted += answer["accepted"]
        duplicates += answer["duplicates"]
    expected: Counter[str] = Counter(lfn for job in reporter.started for lfn in reporter.jobs[job])
    short = []
    for lfn in random.Random(7).sample(sorted(expected), min(sample, len(expected))):
        got = client.get(f"{url}{API}/files/{quote(lfn.lstrip('/'), safe='/')}")["accesses"]
        if got < expected[lfn]:
            short.append((lfn, got, expected[lfn]))
    client.close()
    return {"jobs_checked": len(acked), "lost_jobs": accepted, "duplicates": duplicates,
            "files_checked": min(sample, len(expected)), "files_missing_accesses": short}


class SimulatedMembers:
    """``count`` pool members heartbeating to ``seed`` through the runtime's own Pool class.

    They claim the cache role with plausible capacity facts (``capacity``
    bytes, 60 % free), so the coordinator places files on them; nothing
    listens at their URLs.
    """

    def __init__(self, seed: str, count: int, interval: float = 1.0, expiry: float = 30.0, prefix: str = "sim",
                 capacity: int = 10**12):
        self.client = Client(SECRET.encode(), retries=0, timeout=5.0)
        info = {"cache": {"capacity_bytes": capacity, "free_bytes": capacity * 6 // 10,
                          "used_bytes": capacity * 4 // 10, "files": 1000, "staging": 0}}
        self.pools = [Pool(Member(f"{prefix}-{i:03d}", "http://127.0.0.1:9", ["cache"], "sim", time.time()),
                           [seed], self.client, interval, expiry, info=lambda: info) for i in range(count)]

    def start(self) -> SimulatedMembers:
        for pool in self.pools:
            pool.start()
        return self

    def stop(self) -> None:
        for pool in self.pools:
            pool.stop(wait=False)
        for pool in self.pools:
            pool.stop()

    @property
    def sent(self) -> int:
        return sum(p.heartbeats_sent for p in self.pools)

    @property
    def failures(self) -> int:
        return sum(p.heartbeat_failures for p in self.pools)


def service_node(directory: Path, name: str = "service", port: int | None = None, seeds: list[str] | None = None,
                 cycle: float = 5.0, **pool: Any) -> NodeProcess:
    """An ``htda-node`` subprocess running coordinator and locator (not started)."""
    port = port or free_port()
    url = f"http://127.0.0.1:{port}"
    config = write_config(directory, name, ["coordinator", "locator"], port, seeds or [url],
                          sections={"coordinator": {"cycle": cycle}}, **pool)
    return NodeProcess(config)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=500.0, help="jobs per second")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--members", type=int, default=50, help="simulated heartbeating nodes")
    parser.add_argument("--batch", type=int, default=10, help="jobs per request (the submit agents batch theirs)")
    parser.add_argument("--senders", type=int, default=4, help="job sender threads")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        node = service_node(Path(tmp), interval=1.0, expiry=10.0).start()
        try:
            members = SimulatedMembers(node.url, args.members).start()
            time.sleep(2.0)
            rss_before, cpu_before = rss_mb(node.proc.pid), cpu_seconds(node.proc.pid)
            sampler = RssSampler(lambda: node.proc.pid).start()
            reporter = JobReporter(node.url, args.rate, args.batch, args.senders).start()
            time.sleep(args.seconds)
            reporter.stop(drain=15.0)
            busy = cpu_seconds(node.proc.pid) - cpu_before
            sampler.stop()
            seen = len(node.get(paths.POOL)["members"])
            members.stop()
            rss_after = rss_mb(node.proc.pid)
            result = reporter.summary()
            checked = verify(node.url, reporter)
        finally:
            node.stop()

    print(f"target                         : {args.rate:.0f} jobs/s for {args.seconds:.0f}s, {args.batch} job(s) "
          f"per request, {args.senders} senders, {args.members} heartbeating members")
    print(f"jobs acknowledged              : {result['jobs_acked']} ({result['jobs_per_s']:.0f}/s over "
          f"{result['seconds']:.1f}s incl. drain)")
    print(f"'started' events acknowledged  : {result['started_acked']}")
    print(f"requests ok / errors           : {result['requests']} / {result['errors']} {result['error_kinds'] or ''}")
    print(f"latency ms p50 / p99 / max     : {result['p50_ms']:.1f} / {result['p99_ms']:.1f} / {result['max_ms']:.1f}")
    print(f"heartbeats sent / failed       : {members.sent} / {members.failures}; members seen: {seen}")
    print(f"node RSS MB before/peak/after  : {rss_before:.1f} / {max(sampler.samples or [0]):.1f} / {rss_after:.1f}")
    print(f"node CPU                       : {busy:.1f}s ({100 * busy / result['seconds']:.0f}% of one core)")
    print(f"lost acknowledged jobs         : {checked['lost_jobs']} of {checked['jobs_checked']} "
          f"(re-submitted: {checked['duplicates']} duplicates)")
    print(f"files short of accesses        : {len(checked['files_missing_accesses'])} of {checked['files_checked']}")


if __name__ == "__main__":
    main()

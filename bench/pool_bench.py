"""Pool benchmark: heartbeat round trips per second and node RSS with 50 simulated members.

One real ``htda-node`` (a seed) runs as a subprocess; this process plays 50
pool members, each with its own name, sending signed heartbeats through the
PycURL client as fast as the seed answers (``--threads`` at once).  Every
answer carries the full member list (51 entries), so the figure includes
building and parsing that list.  Prints round trips/s, latency percentiles
and the seed's resident memory.

    python bench/pool_bench.py [--members 50] [--seconds 10] [--threads 2]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout: testkit/ is not installed

from htda.node.client import Client  # noqa: E402
from htda.protocol import paths  # noqa: E402
from testkit.nodes import SECRET, NodeProcess, free_port, write_config  # noqa: E402


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        config = write_config(Path(tmp), "seed", ["locator"], port, [url], interval=1.0,
                              expiry=max(30.0, args.seconds * 2))
        seed = NodeProcess(config).start()
        try:
            rss_idle = rss_mb(seed.proc.pid)
            latencies: list[float] = []
            lock = threading.Lock()
            stop = time.monotonic() + args.seconds
            members = [{"name": f"sim-{i:03d}", "url": f"http://127.0.0.1:{20000 + i}", "roles": ["cache"],
                        "version": "bench", "started": time.time(),
                        "info": {"cache": {"capacity_bytes": 10**12, "free_bytes": 5 * 10**11,
                                           "used_bytes": 5 * 10**11, "files": 1000, "staging": 0}}}
                       for i in range(args.members)]

            def worker(offset: int) -> None:
                client = Client(SECRET.encode(), retries=0)
                mine: list[float] = []
                i = offset
                while time.monotonic() < stop:
                    t0 = time.perf_counter()
                    answer = client.post(url + paths.HEARTBEAT, members[i % len(members)], idempotent=True)
                    mine.append(time.perf_counter() - t0)
                    assert len(answer["members"]) <= len(members) + 1
                    i += args.threads
                with lock:
                    latencies.extend(mine)

            threads = [threading.Thread(target=worker, args=(t,)) for t in range(args.threads)]
            t0 = time.monotonic()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            elapsed = time.monotonic() - t0
            seen = len(seed.get(paths.POOL)["members"])
            rss_loaded = rss_mb(seed.proc.pid)
        finally:
            seed.stop()

    latencies.sort()
    pct = lambda p: latencies[min(len(latencies) - 1, int(p * len(latencies)))] * 1000
    print(f"pool members seen by the seed : {seen} (1 seed + {args.members} simulated)")
    print(f"heartbeat round trips         : {len(latencies)} in {elapsed:.1f}s with {args.threads} sender threads")
    print(f"heartbeat round trips/s       : {len(latencies) / elapsed:,.0f}")
    print(f"latency ms p50 / p99 / mean   : {pct(0.50):.2f} / {pct(0.99):.2f} / "
          f"{statistics.mean(latencies) * 1000:.2f}")
    print(f"seed RSS MB idle / under load : {rss_idle:.1f} / {rss_loaded:.1f}")
    # a pool of N members heartbeating every `interval` seconds needs N/interval round trips/s at the seed
    print(f"members one seed can carry at a 5 s interval: {len(latencies) / elapsed * 5:,.0f}")


if __name__ == "__main__":
    main()

"""Benchmark: job-router hook invocations per second and the locator's batch lookup rate.

A live pool on loopback (``htda-node`` subprocesses): 1 coordinator, 1 locator,
4 cache-role nodes and the submit agent the hooks talk to (on its UNIX socket); plus, for one extra
figure, a second submit agent whose node also runs a locator (looked up
in-process, no HTTP hop).  The locator is
filled with ``--files`` LFNs (default 100,000) through the holdings endpoint
under the cache nodes' names.  The hooks are installed with
``hooks/install-hooks`` (lean ``-IS`` start-up, as deployed; and the native
variant, ``--native``, when a C compiler is at hand) and run as
HTCondor runs them: a process per job, the route line, ``------`` and an
old-format job ad on standard input.

    python bench/hooks_bench.py            # full size, ~1-2 minutes
    python bench/hooks_bench.py --quick    # 10,000 files, fewer jobs

Targets (issue 5): >= 300 hook invocations/s with 2 hooks in parallel, and
>= 100,000 file lookups/s through POST /api/v1/locator/lookup.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from htda.protocol import paths  # noqa: E402
from testkit.http import RawClient  # noqa: E402
from testkit.nodes import NodeProcess, free_port, wait_until, write_config  # noqa: E402
from testkit.processes import proc_sample  # noqa: E402

ROUTE = '[ Name = "HTDA"; EditJobInPlace = true; Requirements = JobUniverse == 5 && HTDA_Routed =!= true ]'
JOB = """ClusterId = {cluster}
Cmd = "/home/alice/ana/run.sh"
GlobalJobId = "submit.example.org#{cluster}.0#1763860000"
HTDA_InputFiles = "{inputs}"
Iwd = "/home/alice/ana"
JobStatus = 1
JobUniverse = 5
Owner = "alice"
ProcId = 0
QDate = 1763860000
Rank = 0.0
RequestCpus = 1
RequestDisk = DiskUsage
RequestMemory = ifthenelse(MemoryUsage =!= undefined,MemoryUsage,(ImageSize + 1023) / 1024)
Requirements = (TARGET.Arch == "X86_64") && (TARGET.OpSys == "LINUX") && (TARGET.HasFileTransfer)
TransferInput = "run.sh"
User = "alice@example.org"
"""
CACHES = [f"cache{i}" for i in range(1, 5)]


def lfn(i: int) -> str:
    return f"/store/bench/run{i // 1000:03d}/file{i:06d}.root"


class Pool:
    """The live pool: node subprocesses sharing one secret, the coordinator as seed."""

    def __init__(self, base: Path):
        self.base, self.nodes = base, {}

    def start(self, name: str, components: list[str], seeds: list[str] | None, **sections) -> NodeProcess:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        config = write_config(self.base, name, components, port, seeds or [url], sections=sections,
                              interval=1.0, expiry=10.0)
        self.nodes[name] = NodeProcess(config).start()
        return self.nodes[name]

    def stop(self) -> None:
        for node in self.nodes.values():
            node.stop()


def fill(locator: NodeProcess, files: int) -> float:
    """Holdings of ``files`` LFNs over the 4 caches (every 4th file on two); returns seconds."""
    per_node: dict[str, list[dict]] = {name: [] for name in CACHES}
    for i in range(files):
        size = 50_000_000 + (i % 97) * 1_000_000
        per_node[CACHES[i % 4]].append({"lfn": lfn(i), "size": size})
        if i % 4 == 0:
            per_node[CACHES[(i + 1) % 4]].append({"lfn": lfn(i), "size": size})
    started = time.perf_counter()
    for name, entries in per_node.items():
        locator.client.post(locator.url + paths.HOLDINGS,
                            {"node": name, "files": entries, "replace": True}, timeout=120)
    return time.perf_counter() - started


def job_inputs(rng: random.Random, files: int, n: int) -> list[str]:
    """Inputs as real analyses have them: a run of consecutive files (so one node tends to hold many)."""
    start = rng.randrange(0, files - n)
    return [lfn(i) for i in range(start, start + n)]


def run_hooks(hook: Path, config: Path, stdins: list[bytes], parallel: int) -> tuple[float, int, int]:
    """Run the hook once per stdin with ``parallel`` at a time; (seconds, steered, failures)."""
    env = {"HTDA_HOOKS_CONFIG": str(config), "PATH": "/usr/bin:/bin"}
    counts = {"steered": 0, "failed": 0}
    lock = threading.Lock()

    def worker(chunk: list[bytes]) -> None:
        for stdin in chunk:
            proc = subprocess.run([str(hook)], input=stdin, capture_output=True, env=env)
            with lock:
                if proc.returncode != 0:
                    counts["failed"] += 1
                elif b"HTDA_PreferredNodes" in proc.stdout:
                    counts["steered"] += 1

    threads = [threading.Thread(target=worker, args=(stdins[i::parallel],)) for i in range(parallel)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - started, counts["steered"], counts["failed"]


def lookup_rate(url: str, files: int, batch: int, seconds: float, clients: int) -> tuple[float, int]:
    """Files looked up per second through the batch endpoint by ``clients`` threads; (rate, held).

    Request bodies are built before the clock starts (the figure is the endpoint's, not the
    client's string formatting); every answer is decoded and its holders counted.
    """
    totals = [0] * clients
    held = [0] * clients
    rng = random.Random(7)
    bodies = [json.dumps({"lfns": [lfn(rng.randrange(files)) for _ in range(batch)]}).encode() for _ in range(64)]

    def worker(k: int) -> None:
        client = RawClient(timeout=30)  # unsigned: lookups are "read" from loopback
        deadline = time.perf_counter() + seconds
        i = k
        while time.perf_counter() < deadline:
            status, raw = client.raw("POST", url + paths.LOOKUP, bodies[i % len(bodies)],
                                     ["Content-Type: application/json"])
            answer = json.loads(raw)
            assert status == 200, answer
            totals[k] += len(answer["files"])
            held[k] += sum(1 for holders in answer["files"].values() if holders)
            i += clients
        client.close()

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(clients)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(totals) / (time.perf_counter() - started), sum(held)


def install_hooks(base: Path, native: bool) -> dict[str, Path]:
    """The translate hook as deployed by hooks/install-hooks: the Python script and, if a C
    compiler is at hand, the native program."""
    installer = str(ROOT / "hooks" / "install-hooks")
    out = {}
    subprocess.run([sys.executable, installer, str(base / "py")], check=True, capture_output=True)
    out["python"] = base / "py" / "htda_translate"
    if native and subprocess.run([sys.executable, installer, "--native", str(base / "native")],
                                 capture_output=True).returncode == 0:
        out["native"] = base / "native" / "htda_translate"
    return out


def import_time_us(hook: Path) -> int:
    """Cumulative import time of the hook's module (python -X importtime), microseconds."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-IS", str(hook)], input=b"",
                          capture_output=True, env={"HTDA_HOOKS_CONFIG": "/nonexistent"})
    match = re.search(rb"\|\s+(\d+) \| htda\.condor\.hooks$", proc.stderr, re.MULTILINE)
    return int(match.group(1)) if match else -1


def cpu_seconds(node: NodeProcess) -> float:
    """User + system CPU time of a node process so far (from /proc)."""
    return proc_sample(node.proc.pid).cpu


def startup_ms(argv: list[str], runs: int = 20) -> float:
    started = time.perf_counter()
    for _ in range(runs):
        subprocess.run(argv, input=b"", capture_output=True, env={"HTDA_HOOKS_CONFIG": "/nonexistent"})
    return (time.perf_counter() - started) / runs * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=100_000, help="LFNs the locator holds")
    parser.add_argument("--jobs", type=int, default=600, help="hook invocations per measurement")
    parser.add_argument("--inputs", type=int, default=10, help="inputs per job")
    parser.add_argument("--batch", type=int, default=1000, help="LFNs per lookup request")
    parser.add_argument("--seconds", type=float, default=5.0, help="duration of each lookup measurement")
    parser.add_argument("--quick", action="store_true", help="10,000 files, 200 jobs, 2 s lookups")
    parser.add_argument("--no-native", action="store_true", help="skip the native (C) hooks")
    args = parser.parse_args()
    if args.quick:
        args.files, args.jobs, args.seconds = 10_000, 200, 2.0

    with tempfile.TemporaryDirectory(prefix="htda-hooks-bench-") as tmp:
        base = Path(tmp)
        pool = Pool(base)
        try:
            coordinator = pool.start("coord", ["coordinator"], None)
            seeds = [coordinator.url]
            locator = pool.start("loc", ["locator"], seeds)
            for name in CACHES:  # no periodic full report during the run: it would replace the fill
                pool.start(name, ["cache"], seeds, cache={"holdings_interval": 3600.0})
            sockets = {name: base / f"{name}.sock" for name in ("submit", "submit2")}  # base: root's, 0700
            agent = pool.start("submit", ["submit"], seeds, submit={"socket": str(sockets["submit"])})
            # A second submit host whose node also runs a locator: the agent looks up in-process.
            colocated = pool.start("submit2", ["submit", "locator"], seeds,
                                   submit={"socket": str(sockets["submit2"])})
            wait_until(lambda: set(CACHES) | {"loc", "coord"} <= agent.members() and set(CACHES) <= locator.members()
                       and set(CACHES) <= colocated.members(), timeout=30, what="the pool to form")
            # The caches' first (empty) full reports must land before the fill, or they replace it.
            wait_until(lambda: set(CACHES) <= set(locator.get(paths.HOLDERS)["nodes"]), timeout=60,
                       what="the caches' first reports")
            time.sleep(1.0)
            fill_seconds = fill(locator, args.files)
            fill(colocated, args.files)
            nodes = locator.get(paths.HOLDERS)["nodes"]
            print(f"pool: 1 coordinator, 1 locator, {len(CACHES)} caches, submit agent; locator holds "
                  f"{sum(n['files'] for n in nodes.values()):,} entries of {args.files:,} LFNs "
                  f"(filled in {fill_seconds:.2f}s)")

            hooks = install_hooks(base, native=not args.no_native)
            config = base / "hooks.toml"
            config.write_text(f'socket = "{sockets["submit"]}"\ntimeout = 0.5\nlog = "{base / "hooks.log"}"\n')
            config2 = base / "hooks2.toml"
            config2.write_text(f'socket = "{sockets["submit2"]}"\ntimeout = 0.5\nlog = "{base / "hooks.log"}"\n')

            python_hook = hooks["python"]
            print(f"hook start-up: python -IS -c pass {startup_ms([sys.executable, '-IS', '-c', 'pass']):.1f} ms; "
                  f"python hook, agent unreachable {startup_ms([str(python_hook)]):.1f} ms; "
                  f"import of htda.condor.hooks {import_time_us(python_hook) / 1000:.1f} ms (python -X importtime)"
                  + (f"; native hook, agent unreachable {startup_ms([str(hooks['native'])]):.1f} ms"
                     if "native" in hooks else ""))

            rng = random.Random(5)
            stdins = [f"{ROUTE}\n------\n".encode() + JOB.format(
                cluster=1000 + k, inputs=",".join(job_inputs(rng, args.files, args.inputs))).encode()
                for k in range(args.jobs)]
            runs = [(variant, hook, config, "submit", "loc") for variant, hook in hooks.items()]
            runs += [(f"{variant}, locator on the agent's node", hook, config2, "submit2", "submit2")
                     for variant, hook in hooks.items() if variant == "native"]
            for variant, hook, cfg, agent_name, locator_name in runs:
                run_hooks(hook, cfg, stdins[:20], 1)  # warm-up (page cache, keep-alive to the locator)
                for parallel in (1, 2):
                    cpu_before = {name: cpu_seconds(pool.nodes[name]) for name in {agent_name, locator_name}}
                    seconds, steered, failed = run_hooks(hook, cfg, stdins, parallel)
                    cpu = {name: (cpu_seconds(pool.nodes[name]) - before) / args.jobs * 1000
                           for name, before in cpu_before.items()}
                    where = (f"agent {cpu[agent_name]:.2f} ms, locator {cpu[locator_name]:.2f} ms"
                             if agent_name != locator_name else f"agent and locator {cpu[agent_name]:.2f} ms")
                    print(f"translate hook ({variant}), {parallel} in parallel: {args.jobs / seconds:7.1f} "
                          f"invocations/s ({args.jobs} jobs, {args.inputs} inputs each, {steered} steered, "
                          f"{failed} failed; CPU per job: {where})")

            for clients in (1, 2):
                rate, held = lookup_rate(locator.url, args.files, args.batch, args.seconds, clients)
                print(f"locator batch lookup, {clients} client(s), {args.batch} LFNs/request: "
                      f"{rate:11,.0f} files/s ({held:,} held)")
        finally:
            pool.stop()


if __name__ == "__main__":
    main()

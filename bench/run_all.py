"""Every benchmark in its quick variant, one after the other (``make bench``): a few minutes in all.

Each bench prints its own figures; this prints a line per bench with its exit
code and time, and exits 1 if any failed.  The full variants (``--full``, the
cluster bench without ``--small``) are for publishing figures; see each
bench's docstring.  Benches that need root (the cluster bench, the attack
replay) are skipped with a line saying so when run as another user.

    python bench/run_all.py                 # every quick bench
    python bench/run_all.py --only hooks    # some of them
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent

#: name -> (command line after the interpreter, needs root)
QUICK: dict[str, tuple[list[str], bool]] = {
    "cache": ([str(BENCH / "cache_bench.py"), "--rounds", "1"], False),
    "coordinator": ([str(BENCH / "coordinator_bench.py")], False),
    "hooks": ([str(BENCH / "hooks_bench.py"), "--quick"], False),
    "load": ([str(BENCH / "load_bench.py"), "--seconds", "10", "--members", "20"], False),
    "pool": ([str(BENCH / "pool_bench.py"), "--seconds", "5"], False),
    "halfopen": ([str(BENCH / "halfopen_bench.py"), "--seconds", "5", "--connections", "100"], False),
    "simulator": ([str(BENCH / "simulator_bench.py")], False),
    # this checkout (with what is not committed yet) against its last commit
    "simulator-ab": ([str(BENCH / "simulator_ab.py"), "HEAD", "--many-objects", "100000", "--runs", "1"], False),
    "adaptive-judge": ([str(BENCH / "adaptive_judge.py"), "--generated", "2", "--samples", "2",
                        "--synthetic-requests", "20000"], False),
    "adaptive-inspect": ([str(BENCH / "adaptive_inspect.py"), "--synthetic", "20000", "--size", "2%"], False),
    "scale": ([str(BENCH / "scale.py"), "--quick"], False),
    "simulator-memory": ([str(BENCH / "simulator_memory.py"), "--requests", "200000"], False),
    "state-memory": ([str(BENCH / "state_memory.py"), "--files", "20000"], False),
    "protocol": ([str(BENCH / "protocol_bench.py")], False),
    "attacks": ([str(BENCH / "attacks.py")], True),
    "cluster": (["-m", "bench.cluster", "run", "--small"], True),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="+", choices=sorted(QUICK), help="run only these benches")
    args = parser.parse_args()
    results = []
    for name in args.only or list(QUICK):
        command, needs_root = QUICK[name]
        if needs_root and os.geteuid() != 0:
            results.append((name, "skipped (needs root)", 0.0))
            continue
        print(f"\n===== {name}: {' '.join(command)}", flush=True)
        started = time.monotonic()
        code = subprocess.run([sys.executable, *command], cwd=BENCH.parent).returncode
        results.append((name, "ok" if code == 0 else f"FAILED (exit {code})", time.monotonic() - started))
    print("\n===== summary")
    for name, outcome, seconds in results:
        print(f"{name:12} {outcome:24} {seconds:6.0f} s")
    return 1 if any(outcome.startswith("FAILED") for _, outcome, _ in results) else 0


if __name__ == "__main__":
    sys.exit(main())

"""``make bench`` runs bench/run_all.py: every bench it names exists, and every bench file is named."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.bench_scripts import load_bench_script

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _run_all():
    return load_bench_script("run_all.py", "run_all")


def test_every_bench_is_run_and_exists():
    quick = _run_all().QUICK
    scripts = {Path(command[0]).name for command, _ in quick.values() if not command[0].startswith("-")}
    # attack_pool and scale_coordinator are modules of other benches (hooks and scale)
    standalone = {p.name for p in BENCH.glob("*.py")} - {"run_all.py", "attack_pool.py", "scale_coordinator.py"}
    assert scripts == standalone
    assert all((BENCH / s).is_file() for s in scripts)
    assert quick["cluster"][0][:2] == ["-m", "bench.cluster"] and quick["cluster"][1]


def test_only_refuses_unknown_benches():
    done = subprocess.run([sys.executable, str(BENCH / "run_all.py"), "--only", "nonsense"], capture_output=True,
                          text=True)
    assert done.returncode == 2 and "invalid choice" in done.stderr

"""bench/simulator_ab.py: an earlier commit's htda(auto) and this checkout's, side by side in one replay."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from htda.simulator.generator import AnalysisWorkload
from htda.simulator.trace import write_csv

REPO = Path(__file__).resolve().parents[2]


def test_a_commit_against_itself_hits_the_same_and_is_about_as_fast(tmp_path):
    trace = tmp_path / "small.csv"
    write_csv(trace, AnalysisWorkload(requests=20_000, seed=3).rows())
    out = subprocess.run([sys.executable, str(REPO / "bench" / "simulator_ab.py"), "HEAD", str(trace), "--runs", "2"],
                         check=True, capture_output=True, text=True, cwd=REPO, timeout=600).stdout
    runs = re.findall(r"small: run \d: this ([\d,]+), base ([\d,]+) requests/s of CPU, ratio ([\d.]+); hits (.+)", out)
    assert len(runs) == 2 and all(same == "the same" for *_, same in runs)
    assert all(float(ratio) > 0 for *_, ratio, _ in runs)  # both replayed; how fast is the machine's business
    assert "this checkout over HEAD:" in out
    worktrees = subprocess.run(["git", "-C", str(REPO), "worktree", "list"], capture_output=True, text=True).stdout
    assert "htda-ab-" not in worktrees  # the checkout it built is gone

"""bench/adaptive_inspect.py: the adaptive rating's choice on one trace and size, as htda simulate replays it."""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from htda.simulator.generator import AnalysisWorkload
from htda.simulator.trace import write_csv

REPO = Path(__file__).resolve().parents[2]
INSPECT = [sys.executable, str(REPO / "bench" / "adaptive_inspect.py")]


def run(*args: str | Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*INSPECT, *map(str, args)], check=check, capture_output=True, text=True, cwd=REPO,
                          timeout=300)


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("inspect") / "jobs.csv"
    write_csv(path, AnalysisWorkload(requests=6_000, seed=5).rows())
    return path


@pytest.fixture(scope="module")
def phased(tmp_path_factory) -> Path:
    """Phases that alternate between a drifting working set and hot objects among scans: the choice switches."""
    rng = random.Random(3)

    def rows():
        t = 0.0
        for i in range(30_000):
            t += rng.choice((0.0, 1.0, 2.0))
            drifting = (i // 3000) % 2 == 0
            hot_or_once = rng.randrange(100) if rng.random() < 0.5 else 100_000 + i
            obj = 1000 + (i // 300) * 30 + rng.randrange(30) if drifting else hot_or_once
            yield t, f"o{obj}", 1000, None
    path = tmp_path_factory.mktemp("inspect") / "phased.csv"
    write_csv(path, rows())
    return path


def simulated(trace: Path, size: str) -> float:
    done = subprocess.run([sys.executable, "-m", "htda.cli", "simulate", str(trace), "--sizes", size,
                           "--half-lives", "auto", "--admission", "none", "--policies", "lru", "--no-belady",
                           "--no-bound", "--json"], check=True, capture_output=True, text=True, cwd=REPO, timeout=300)
    (auto,) = [r for r in json.loads(done.stdout)["results"] if r["policy"] == "htda(auto)"]
    return auto["byte_hit_ratio"]


def test_it_replays_htda_auto_as_the_simulator_does_and_lists_the_shadows_best_first(trace):
    out = run(trace, "--size", "5%", "--top", "4").stdout
    ratio = float(re.search(r"htda\(auto\) byte hit ratio (\d\.\d{4})", out).group(1))
    assert ratio == round(simulated(trace, "5%"), 4)
    shadows = out.split("each shadow's byte hit ratio over the whole trace")[1].strip().splitlines()[1:]
    shares = [float(line.split()[0]) for line in shadows]
    assert len(shares) == 4 and shares == sorted(shares, reverse=True) and all(0 <= s <= 1 for s in shares)
    assert all(line.split()[2] in ("plain", "asking", "probation") for line in shadows)


def test_rounds_show_each_decision_and_end_where_the_changes_end(phased):
    out = run(phased, "--size", "5%", "--rounds", "0", "1e18").stdout
    rounds = re.findall(r"^\s+[\d,]+\s+\S+ (\w+)\s+round: .* -> (\S+) (\w+)", out, re.M)
    assert rounds, out
    # each round starts from what the one before it ended with
    assert all(prev[2] == this[0] for prev, this in zip(rounds, rounds[1:]))
    changes = out.split("what it ranked by")[1].split("each shadow")[0].strip().splitlines()[1:]
    assert changes and "(the start only)" not in changes[0], out  # the phases make it change
    assert changes[-1].split()[-1] == rounds[-1][2]
    # a change is listed at the time of the round that made it
    made = re.findall(r"^\s+([\d,]+)\s+(\S+ \w+)\s+round: .* -> (\S+ \w+)", out, re.M)
    assert [line.split()[0] for line in changes] == [t for t, was, now in made if was.split() != now.split()]


def test_the_synthetic_workload_instead_of_a_trace_but_not_both(trace):
    out = run("--synthetic", "3000", "--size", "2%").stdout
    assert re.search(r"synthetic\.csv: 3,000 requests, cache 2% of the footprint", out)
    for args in ([], [trace, "--synthetic", "3000"]):
        done = run(*args, "--size", "2%", check=False)
        assert done.returncode == 2 and "give a trace or --synthetic REQUESTS, not both" in done.stderr


def test_a_bad_size_or_a_missing_trace_is_refused_in_one_line(trace, tmp_path):
    done = run(trace, "--size", "lots", check=False)
    assert done.returncode == 2 and "cache size 'lots' is not a size" in done.stderr
    done = run(tmp_path / "none.csv", "--size", "5%", check=False)
    assert done.returncode == 2 and "none.csv" in done.stderr and "Traceback" not in done.stderr

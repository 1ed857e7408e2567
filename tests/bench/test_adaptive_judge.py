"""bench/adaptive_judge.py: the adaptive rating over samples of the groups, against the best baseline per cell."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

from htda.simulator.generator import AnalysisWorkload
from htda.simulator.trace import write_csv

REPO = Path(__file__).resolve().parents[2]
JUDGE = [sys.executable, str(REPO / "bench" / "adaptive_judge.py")]
BASELINES = ("lru", "lfu", "arc", "s3fifo", "wtinylfu")


def judge(*args: str | Path) -> str:
    return subprocess.run([*JUDGE, *map(str, args)], check=True, capture_output=True, text=True, cwd=REPO,
                          timeout=600).stdout


def cells_at_or_above(path: Path, baselines: Path) -> int:
    """Counted here from the replays' JSON, independently of the judge."""
    def by_size(p: Path) -> dict[str, list[float]]:
        results = json.loads(p.read_text())["results"]
        out: dict[str, list[float]] = {}
        for r in sorted(results, key=lambda r: r["capacity_bytes"]):
            out.setdefault(r["policy"], []).append(r["byte_hit_ratio"])
        return out
    mine, base = by_size(path), by_size(baselines)
    return sum(h >= max(base[p][i] for p in BASELINES) - 1e-9 for i, h in enumerate(mine["htda(auto)"]))


def without_speed(report: str) -> str:
    return re.sub(r"^(htda\(auto\) replay, |  as a share of LRU's speed).*$", "", report, flags=re.M)


def speed(path: Path, policy: str) -> float:
    data = json.loads(path.read_text())
    times = [r["cpu_seconds"] for r in data["results"] if r["policy"] == policy]
    return data["requests"] * len(times) / sum(times)


def test_the_judge_counts_each_sample_and_reuses_what_it_replayed(tmp_path):
    traces = tmp_path / "traces"
    traces.mkdir()
    write_csv(traces / "jobs.csv", AnalysisWorkload(requests=4_000, seed=3).rows())
    out = tmp_path / "out"
    first = judge(traces, "--out", out, "--samples", "2", "--synthetic-requests", "3000")
    rows = re.findall(r"^(\d)\s+(\d+) of 5\s+([+-]\d\.\d{4})\s+(-?[\d.]+ %|-)$", first, re.M)
    assert [seed for seed, *_ in rows] == ["0", "1"]
    for seed, wins, _, _ in rows:
        assert int(wins) == cells_at_or_above(out / f"jobs.s{seed}.json", out / "jobs.s0.json")
    assert re.search(r"at or above in every sample: \d+; in none: \d+; varying with the sample: \d+", first)
    assert re.search(r"synthetic analysis workload \(3,000 requests\): \d+ of 10 sizes", first)
    share = speed(out / "jobs.s0.json", "htda(auto)") / speed(out / "jobs.s0.json", "lru")  # the same run's
    assert f"as a share of LRU's speed on the same trace: lowest {share:.2f} (jobs), median {share:.2f}" in first
    made = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    assert set(made) == {"jobs.s0.json", "jobs.s1.json", "synthetic.s0.json"}
    assert judge(traces, "--out", out, "--samples", "2", "--synthetic-requests", "3000") == first
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == made  # nothing replayed again
    # another build's judgement takes the baselines and the bound from the first: it replays HTDA (and LRU) only
    again = tmp_path / "again"
    reused = judge(traces, "--out", again, "--samples", "2", "--synthetic-requests", "3000", "--baselines", out)
    assert without_speed(reused) == without_speed(first)  # the same hits; the speed is that run's
    assert {r["policy"] for r in json.loads((again / "jobs.s0.json").read_text())["results"]} == {"htda(auto)", "lru"}


def test_a_folder_without_traces_is_refused_by_name(tmp_path):
    (tmp_path / "notes.txt").write_text("not a trace")
    done = subprocess.run([*JUDGE, str(tmp_path)], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert done.returncode == 2 and f"{tmp_path}: no traces in it (*.csv (plain, .gz" in done.stderr


def test_a_folder_or_generated_traces_but_not_both(tmp_path):
    for args in ([], [str(tmp_path), "--generated", "1"]):
        done = subprocess.run([*JUDGE, *args], capture_output=True, text=True, cwd=REPO, timeout=60)
        assert done.returncode == 2 and "give a folder of traces or --generated N, not both" in done.stderr


def test_hindsight_reports_what_a_perfect_choice_among_the_candidates_reaches(tmp_path):
    traces = tmp_path / "traces"
    traces.mkdir()
    write_csv(traces / "jobs.csv", AnalysisWorkload(requests=4_000, seed=5).rows())
    out = tmp_path / "out"
    report = judge(traces, "--out", out, "--samples", "1", "--synthetic-requests", "0", "--hindsight")
    found = re.search(r"^a perfect choice among the (\d+) candidates \(hindsight, sample 0, cell by cell\): "
                      r"(\d+) of 5 cells, mean ([+-]\d\.\d{4}).*; below the best baseline whatever the choice: "
                      r"(\d+); the best single candidate: (htda\(\w+, \w+\)), (\d+) cells$", report, re.M)
    assert found, report
    # counted here from the replays' JSON: each candidate alone, the default and the baselines, cell by cell
    results = json.loads((out / "jobs.hindsight.json").read_text())["results"]
    base = json.loads((out / "jobs.s0.json").read_text())["results"]
    capacities = sorted({r["capacity_bytes"] for r in base})
    best = [max(r["byte_hit_ratio"] for r in base if r["capacity_bytes"] == c and r["policy"] in BASELINES)
            for c in capacities]
    alone = {r["policy"] for r in results if r["policy"].startswith("htda(") and r["policy"] != "htda(auto)"}
    oracle = [max(r["byte_hit_ratio"] for r in results if r["capacity_bytes"] == c and r["policy"].startswith("htda("))
              for c in capacities]
    wins = sum(o >= b - 1e-9 for o, b in zip(oracle, best))
    assert int(found[1]) == len(alone) == 20  # five half-lives in four layouts
    assert (int(found[2]), int(found[4])) == (wins, 5 - wins)
    assert abs(float(found[3]) - sum(o - b for o, b in zip(oracle, best)) / 5) <= 0.00005 + 1e-12
    single = sum(r["byte_hit_ratio"] >= best[capacities.index(r["capacity_bytes"])] - 1e-9
                 for r in results if r["policy"] == found[5])
    assert int(found[6]) == single
    everything = re.search(r"^a perfect choice among them and the baselines: mean ([+-]\d\.\d{4})", report, re.M)
    assert everything, report
    assert abs(float(everything[1]) - sum(max(o - b, 0) for o, b in zip(oracle, best)) / 5) <= 0.00005 + 1e-12
    assert wins >= cells_at_or_above(out / "jobs.s0.json", out / "jobs.s0.json")  # the oracle has the default too
    # without --hindsight the line is not there, and nothing is replayed again
    made = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    assert "perfect choice" not in judge(traces, "--out", out, "--samples", "1", "--synthetic-requests", "0")
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == made


def test_against_another_folder_it_lists_the_cells_that_moved_and_those_that_crossed(tmp_path):
    traces = tmp_path / "traces"
    traces.mkdir()
    write_csv(traces / "jobs.csv", AnalysisWorkload(requests=4_000, seed=7).rows())
    before = tmp_path / "before"
    judge(traces, "--out", before, "--samples", "1", "--synthetic-requests", "0")
    # another build's folder, as if its HTDA had crossed the best baseline at the smallest size
    after = tmp_path / "after"
    shutil.copytree(before, after)
    data = json.loads((after / "jobs.s0.json").read_text())
    smallest = min(r["capacity_bytes"] for r in data["results"])
    best = max(r["byte_hit_ratio"] for r in data["results"]
               if r["capacity_bytes"] == smallest and r["policy"] in BASELINES)
    htda = next(r for r in data["results"] if r["capacity_bytes"] == smallest and r["policy"] == "htda(auto)")
    was, above = htda["byte_hit_ratio"], htda["byte_hit_ratio"] >= best - 1e-9
    assert 0 < best < 0.95
    htda["byte_hit_ratio"] = now = best / 2 if above else best + 0.05
    (after / "jobs.s0.json").write_text(json.dumps(data))
    report = judge(traces, "--out", after, "--samples", "1", "--synthetic-requests", "0", "--against", before)
    gained, lost = ("none", "jobs 1%") if above else ("jobs 1%", "none")
    assert f"against {before} (sample 0): 1 cells moved; at or above the best baseline now, not before: " \
        f"{gained}; before, not now: {lost}" in report, report
    line = re.search(r"^  jobs 1%\s+(\d\.\d{4}) -> (\d\.\d{4}) ([+-]\d\.\d{4})  \((\w+) (\d\.\d{4})\) (\w+)$",
                     report, re.M)
    assert line, report
    assert (line[1], line[2], line[6]) == (f"{was:.4f}", f"{now:.4f}", "lost" if above else "gained")
    assert line[4] in BASELINES and line[5] == f"{best:.4f}"
    # against itself, nothing moved
    assert f"against {after} (sample 0): 0 cells moved; at or above the best baseline now, not before: none; " \
        "before, not now: none" in judge(traces, "--out", after, "--samples", "1", "--synthetic-requests", "0",
                                         "--against", after)


def test_against_a_missing_folder_is_refused_by_name(tmp_path):
    done = subprocess.run([*JUDGE, str(tmp_path), "--against", str(tmp_path / "nowhere")], capture_output=True,
                          text=True, cwd=REPO, timeout=60)
    assert done.returncode == 2 and f"--against {tmp_path / 'nowhere'}: not a folder" in done.stderr

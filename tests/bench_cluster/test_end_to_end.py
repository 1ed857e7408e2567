"""The whole benchmark at a tiny size: every mode, identical histograms, everything torn down."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from bench.cluster import topology
from bench.cluster.condor import INSTALL_HINT, condor_home

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ("xrootd", "xrootdfs", "mergerfs", "ip", "tc", "nsenter")


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.skipif(os.geteuid() != 0 or not all(shutil.which(t) for t in TOOLS),
                    reason="needs root and " + ", ".join(TOOLS))
@pytest.mark.parametrize("negotiator", [
    pytest.param("condor", marks=pytest.mark.skipif(condor_home() is None, reason=INSTALL_HINT)), "standin"])
def test_small_run_of_every_mode(negotiator):
    prefix = f"e{os.getpid() % 100000}"
    # not under pytest's tmp_path: other pytest sessions reset its base to mode 700, and xrootd runs as 'xrootd'
    tmp_path = Path(tempfile.mkdtemp(prefix="htda-bench-e2e-", dir="/var/tmp"))
    try:
        _run_and_check(tmp_path, prefix, negotiator)
    finally:
        subprocess.run([sys.executable, "-m", "bench.cluster", "cleanup", "--workdir", str(tmp_path), "--prefix",
                        prefix], cwd=ROOT, capture_output=True)
        shutil.rmtree(tmp_path, ignore_errors=True)


def _run_and_check(tmp_path: Path, prefix: str, negotiator: str) -> None:
    done = subprocess.run([sys.executable, "-m", "bench.cluster", "run", "--workdir", str(tmp_path), "--prefix", prefix,
                           "--negotiator", negotiator,
                           "--workers", "2", "--dataset-mb", "100", "--file-mb", "10", "20", "--passes", "2",
                           "--jobs-per-pass", "3", "--files-per-job", "2", "--think", "1"],
                          cwd=ROOT, capture_output=True, text=True, timeout=880)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "correctness: 6/6 jobs gave identical histograms in every mode" in done.stdout
    results = json.loads(next(tmp_path.glob("results/*/results.json")).read_text())
    assert set(results["modes"]) == {"nocache", "htda", "xcache", "ideal"}
    assert "htda / ideal" in done.stdout and "makespan" in done.stdout  # the ratios beside their goals
    assert {m["placement"]["negotiator"] for m in results["modes"].values()} == {negotiator}
    htda = results["modes"]["htda"]
    assert {"service", "w1", "w2"} <= set(htda["daemons"])  # the HTDA daemons were sampled
    assert all(j["bytes"] > 0 for m in results["modes"].values() for j in m["jobs"])
    # without a cache the data comes over the storage link (concurrent readers of one file may share pages)
    nocache = results["modes"]["nocache"]
    assert nocache["link_bytes"] >= 0.5 * sum(j["bytes"] for j in nocache["jobs"])
    assert results["modes"]["ideal"]["link_bytes"] < 0.01 * nocache["link_bytes"]  # the ideal reads local copies
    assert "rate 1Gbit" in results["host_shaping"]
    assert all(p.stat().st_size > 1000 for p in tmp_path.glob("results/*/*.png"))
    assert topology.namespaces(prefix) == []
    assert not [line for line in Path("/proc/mounts").read_text().splitlines() if str(tmp_path) in line]

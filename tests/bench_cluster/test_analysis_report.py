"""The analysis job (hash, bytes read) and the report's arithmetic (rates, hit ratio, correctness check)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from bench.cluster import report
from bench.cluster.analysis import analyse
from bench.cluster.dataset import DatasetSpec, ensure_dataset
from bench.cluster.monitor import proc_sample


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return ensure_dataset(tmp_path_factory.mktemp("ds"), DatasetSpec(total_mb=4, min_file_mb=2, max_file_mb=2),
                          log=lambda _: None)


def test_histograms_depend_on_the_data_and_bytes_are_counted(files, tmp_path):
    one, both = analyse([files[0].path]), analyse([files[0].path, files[1].path])
    assert analyse([files[0].path]) == one
    assert one["hash"] != both["hash"] and one["events"] == files[0].events
    assert 0.3 * files[0].size < one["bytes"] <= files[0].size  # some branches, not the whole file
    copy = tmp_path / "copy.root"
    copy.write_bytes(open(files[0].path, "rb").read())
    assert analyse([str(copy)])["hash"] == one["hash"]


def test_job_runner_answers_each_request_and_survives_a_bad_one(files):
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    lines = "".join(json.dumps({"job": j, "paths": p}) + "\n"
                    for j, p in (("a", [files[0].path]), ("b", ["/nonexistent.root"]), ("c", [files[1].path])))
    done = subprocess.run([sys.executable, "-m", "bench.cluster.analysis", "--serve"], input=lines, text=True,
                          capture_output=True, cwd=root, timeout=120)
    out = [json.loads(line) for line in done.stdout.splitlines()]
    assert [o["job"] for o in out] == ["a", "b", "c"]
    assert "error" in out[1] and "hash" in out[0] and "hash" in out[2]


def _job(job, p, start, end, nbytes, h="x", **kw):
    return {"job": job, "pass": p, "start": start, "end": end, "bytes": nbytes, "hash": h, "worker": "w1",
            "input_bytes": nbytes, "cached_bytes": kw.get("cached", 0), "preferred": kw.get("preferred", [])}


def _mode(name, jobs, link=0):
    spans = {}
    for j in jobs:
        a, b = spans.get(j["pass"], (j["start"], j["end"]))
        spans[j["pass"]] = (min(a, j["start"]), max(b, j["end"]))
    return {"mode": name, "jobs": jobs, "link_bytes": link, "started": 0.0, "ended": 40.0,
            "pass_times": {str(k): v for k, v in spans.items()}, "daemons": {}, "link_samples": []}


def test_rates_hit_ratio_and_later_passes():
    assert report.later_passes(4) == [3, 4] and report.later_passes(2) == [2] and report.later_passes(1) == [1]
    jobs = [_job("a", 1, 0, 10, 100e6), _job("b", 2, 10, 20, 300e6, cached=150e6)]
    row = report.summarize(_mode("htda", jobs), passes=2)
    assert row["rate_later"] == pytest.approx(30.0) and row["rate_all"] == pytest.approx(20.0)
    assert row["job_rate_later"] == pytest.approx(30.0)
    assert row["hit_ratio"] == pytest.approx(150 / 400)
    assert report.summarize(_mode("xcache", jobs, link=100e6), passes=2)["hit_ratio"] == pytest.approx(0.75)


def test_rate_series_conserves_bytes():
    jobs = [_job("a", 1, 0, 7, 70e6), _job("b", 1, 3, 12, 90e6)]
    x, y = report.rate_series(jobs, 0.0, step=5.0)
    assert x == [0.0, 5.0, 10.0]
    assert sum(v * 5.0 for v in y) == pytest.approx(160.0)


def test_correctness_names_jobs_that_differ():
    results = {"modes": {"nocache": _mode("nocache", [_job("a", 1, 0, 1, 1, "h1"), _job("b", 1, 0, 1, 1, "h2")]),
                         "htda": _mode("htda", [_job("a", 1, 0, 1, 1, "h1"), _job("b", 1, 0, 1, 1, "XX")])}}
    assert report.correctness(results) == (1, 2, ["b"])


def test_proc_sample_reads_this_process():
    sample = proc_sample(os.getpid())
    assert sample.cpu > 0 and 10e6 < sample.rss < 10e9
    assert proc_sample(2**22 + 12345) is None

"""The analysis job (hash, bytes read) and the report's arithmetic (rates, hit ratio, correctness check)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from bench.cluster import report
from bench.cluster.analysis import analyse
from bench.cluster.dataset import DatasetSpec, ensure_dataset
from bench.cluster.htda_pool import parse_open_counters
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


def test_ratios_set_htda_beside_each_goal_met_or_not():
    runs = {"nocache": [_job("a", 1, 0, 10, 100e6), _job("b", 2, 10, 20, 100e6)],
            "htda": [_job("a", 1, 0, 20, 100e6), _job("b", 2, 20, 22, 100e6)],
            "xcache": [_job("a", 1, 0, 12, 100e6), _job("b", 2, 12, 16, 100e6)]}
    modes = {name: _mode(name, jobs, link=1e9 if name != "xcache" else 2e9) for name, jobs in runs.items()}
    modes["xcache"]["ended"] = 50.0
    text = report.ratios({"config": {"workload": {"passes": 2}}, "modes": modes})
    rows = {tuple(re.split(r"\s{2,}", line.strip())) for line in text.splitlines()}
    assert ("makespan", "htda / xcache", "0.80", "<= 0.85", "yes") in rows  # 40 s against 50 s
    assert ("pass 1 rate", "htda / nocache", "0.50", ">= 0.95", "NO") in rows  # unfavourable, shown as well
    assert ("storage bytes", "htda / xcache", "0.50", "<= 1.2", "yes") in rows
    assert "htda / ideal" not in text  # no ideal run: no ratio to it


def test_spread_gives_medians_ranges_and_the_median_ratio_against_its_goal():
    def run(htda_end):
        modes = {"xcache": _mode("xcache", [_job("a", 1, 0, 10, 100e6)], link=1e9),
                 "htda": _mode("htda", [_job("a", 1, 0, 10, 100e6)], link=1e9)}
        modes["xcache"]["ended"], modes["htda"]["ended"] = 100.0, htda_end
        return {"config": {"workload": {"passes": 1}}, "modes": modes}

    text = report.spread([run(80.0), run(90.0), run(130.0)])
    rows = {tuple(re.split(r"\s{2,}", line.strip())) for line in text.splitlines()}
    assert ("htda", "3", "90 (80-130)") == next(r[:3] for r in rows if r[0] == "htda")
    assert ("makespan", "htda / xcache", "0.90", "0.80-1.30", "<= 0.85", "NO") in rows


def _counted(cache: int, storage: int, size: int = 100) -> dict:
    return {"opens": {"cache": cache, "storage": storage}, "bytes": {"cache": cache * size, "storage": storage * size}}


def test_the_hit_metric_check_compares_the_nodes_counters_with_what_the_jobs_saw():
    def opened(n_cache, n_storage):
        return [{"from": "cache", "size": 100}] * n_cache + [{"from": "storage", "size": 100}] * n_storage

    jobs = [{"worker": "w1", "opened": opened(60, 40)}, {"worker": "w2", "opened": opened(0, 100)}]
    mode = {"jobs": jobs, "open_counters": {"w1": _counted(60, 40), "w2": _counted(0, 100)}}
    check = report.hit_check(mode)
    assert check.truth == pytest.approx(0.3) and check.metric == pytest.approx(0.3) and check.ok and not check.problems
    # one open of 200 classified apart (a copy landed as it was opened): the shares part, yet that is allowed
    mode["open_counters"]["w1"] = _counted(61, 39)
    check = report.hit_check(mode)
    assert check.ok and check.problems == ["1 of 200 opens classified apart (a copy landed as the file was opened)"]
    mode["open_counters"]["w1"] = _counted(66, 34)  # six: the metric is wrong
    assert not report.hit_check(mode).ok
    mode["open_counters"]["w1"] = _counted(60, 39)  # an open the node missed
    check = report.hit_check(mode)
    assert not check.ok and "w1: the jobs opened 100 files, the node counted 99" in check.problems
    mode["open_counters"]["w1"] = {"error": "/metrics unreadable: timed out"}  # never a silent share of w2 alone
    check = report.hit_check(mode)
    assert not check.ok and check.problems == ["w1: /metrics unreadable: timed out"]
    assert report.hit_check({"jobs": [{}], "open_counters": {}}) is None  # the stand-in: nothing to check


def test_open_counters_are_read_from_a_scrape():
    text = ('# HELP htda_cache_job_opens_total x\nhtda_cache_job_opens_total{source="cache"} 3.0\n'
            'htda_cache_job_opened_bytes_total{source="storage"} 1500.0\nhtda_cache_job_open_files{source="cache"} 1\n')
    assert parse_open_counters(text) == {"opens": {"cache": 3.0}, "bytes": {"storage": 1500.0}}


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


def test_storage_bytes_are_split_by_pass_with_the_pause_after_each_pass():
    # cumulative (time, tx, rx): 100 bytes per second both ways together
    samples = [(float(t), 60 * t, 40 * t) for t in range(0, 31)]
    spans = {1: (0.0, 8.0), 2: (10.0, 18.0), 3: (20.0, 25.0)}
    assert report.link_bytes_by_pass(samples, spans) == {1: 1000, 2: 1000, 3: 1000}  # the last runs to the end
    assert report.link_bytes_by_pass([], spans) == {1: 0, 2: 0, 3: 0}


def test_link_rates_in_bytes_per_second():
    assert report.link_rate("200mbit") == 25e6 and report.link_rate("1gbit") == 125e6
    assert report.link_rate("500kbit") == 62_500


def test_the_cold_floor_counts_new_files_once_at_the_storage_rate_after_the_ideal_start():
    def job(name, p, start, end, inputs):
        return {**_job(name, p, start, end, 10e6), "inputs": inputs}

    # pass 2 reads "a" again and the new "b" (100 MB: 4 s at 200 Mbit/s) once, though two jobs ask for it
    ideal = [job("x", 1, 1, 2, ["a"]), job("y", 2, 12, 14, ["a", "b"]), job("z", 2, 12, 13, ["b"])]
    htda = [job("x", 1, 0, 5, ["a"]), job("y", 2, 10, 20, ["a", "b"]), job("z", 2, 10, 16, ["b"])]
    results = {"config": {"workload": {"passes": 2}, "storage_rate": "200mbit"},
               "files": [{"lfn": "a", "size": 50_000_000}, {"lfn": "b", "size": 100_000_000}],
               "modes": {"htda": _mode("htda", htda), "ideal": _mode("ideal", ideal)}}
    results["modes"]["ideal"]["pass_times"]["2"] = (10.0, 14.0)  # submitted at 10, first start at 12
    assert report.new_input_bytes(results) == {1: 50_000_000, 2: 100_000_000}
    rows = [re.split(r"\s{2,}", line.strip()) for line in report.cold_floor(results).splitlines()]
    assert ["2", "0.10", "4.0", "2.0", "4.0", "6.0", "10.0"] in rows  # floor: 2 s to start + 4 s of new data
    assert ["1", "0.05", "2.0", "0.0", "1.0", "2.0", "5.0"] in rows  # pass 1: every input is new
    assert ["run (+0 s think)", "5.0", "8.0", "15.0"] in rows  # the whole run: the passes' floors summed
    results["config"]["think"] = 10.0
    results["modes"]["xcache"] = results["modes"]["htda"]
    text = report.cold_floor(results)
    assert "run (+10 s think)  15.0  18.0  25.0  25.0" in re.sub(r"\s{2,}", "  ", text)
    assert "no cache that starts reading with the jobs finishes before 18.0 s" in text
    assert "0.72x XCache's run is the least such a cache could reach" in text
    del results["modes"]["xcache"], results["config"]["think"]
    assert report.cold_floor({**results, "modes": {"htda": results["modes"]["htda"]}}) == ""  # no ideal run
    as_run = {name: {**mode, "pass_times": {int(k): v for k, v in mode["pass_times"].items()}}
              for name, mode in results["modes"].items()}  # a run's own results, before JSON: int keys
    assert report.cold_floor({**results, "modes": as_run}) == report.cold_floor(results)


def test_the_table_shows_each_modes_cache_disk_split_by_area_where_there_are_several():
    jobs = [_job("a", 1, 0, 10, 100e6)]
    modes = {name: _mode(name, jobs) for name in ("nocache", "xcache", "htda")}
    modes["xcache"]["cache_disk"] = {"xcache": 1_200_000_000}
    modes["htda"]["cache_disk"] = {"htda devices": 1_000_000_000, "read-through": 500_000_000}
    text = report.table({"config": {"workload": {"passes": 1}}, "modes": modes})
    lines = text.splitlines()
    start = lines[0].rindex(" ") + 1  # the last column of the rule above the head
    last = {line.split()[0]: line[start:].strip() for line in lines if line[:1].isalpha()}
    assert last == {"mode": "cache disk GB", "nocache": "-", "xcache": "1.20", "htda": "1.50 (1.00 + 0.50)"}

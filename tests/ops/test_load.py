"""Load: job reports at 500/s plus 50 heartbeating members on loopback, with zero errors,
nothing acknowledged lost and bounded memory.  The full 60 s run is bench/load_bench.py."""

from __future__ import annotations

import time

import pytest

from .helpers import load_bench, unhandled_errors

SECONDS = 10.0
RATE = 500.0
MEMBERS = 50


@pytest.mark.slow
def test_job_reports_and_heartbeats_under_load(tmp_path):
    bench = load_bench()
    node = bench.service_node(tmp_path, interval=1.0, expiry=10.0).start()
    members = None
    try:
        members = bench.SimulatedMembers(node.url, MEMBERS).start()
        time.sleep(2.0)
        rss_before = bench.rss_mb(node.proc.pid)
        sampler = bench.RssSampler(lambda: node.proc.pid).start()
        reporter = bench.JobReporter(node.url, RATE, batch=10).start()
        time.sleep(SECONDS)
        reporter.stop(drain=15.0)
        sampler.stop()
        seen = {m["name"] for m in node.get("/api/v1/pool")["members"]}
        result = reporter.summary()
        checked = bench.verify(node.url, reporter)
        rss_after = bench.rss_mb(node.proc.pid)
    finally:
        if members:
            members.stop()
        node.stop()
    print(f"load: {result}, heartbeats {members.sent}/{members.failures} failed, "
          f"RSS MB {rss_before:.1f} -> peak {max(sampler.samples):.1f} -> {rss_after:.1f}, check {checked}")
    assert result["errors"] == 0, result["error_kinds"]
    assert result["jobs_acked"] >= RATE * SECONDS * 0.5  # the load really ran (rates are the benchmark's job)
    assert result["started_acked"] == result["jobs_acked"]
    assert members.failures == 0 and len(seen) == MEMBERS + 1
    assert checked["lost_jobs"] == 0 and checked["duplicates"] == result["jobs_acked"]
    assert not checked["files_missing_accesses"]
    assert max(sampler.samples) - rss_before < 200, "the node's memory grew by more than 200 MB"
    assert not unhandled_errors(node)

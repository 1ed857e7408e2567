"""The suite's verdict on one trace: where HTDA is below the best baseline, and how much of the gap to the bound
it closes."""

from __future__ import annotations

import os
import re
import signal
import time

import numpy as np
import pytest

from htda.simulator.suite import SuiteTrace, TraceVerdict, run_suite
from htda.simulator.trace import NO_GROUP, Chunk, TraceError


def test_a_size_with_a_tiny_gap_swings_the_mean_share_but_not_the_summed_one():
    # (fraction, htda, best baseline, its ratio, bound): half the gap closed at 1 %, 0.004 lost where the gap is 0.002
    verdict = TraceVerdict("t", [(0.01, 0.30, "lru", 0.20, 0.40), (0.5, 0.896, "arc", 0.900, 0.902)])
    assert verdict.gap_closed == pytest.approx((0.5 - 2.0) / 2)
    assert verdict.summed_gap_closed == pytest.approx((0.10 - 0.004) / (0.20 + 0.002))
    assert not verdict.wins_everywhere


def test_without_a_gap_there_is_no_summed_share():
    verdict = TraceVerdict("t", [(0.01, 0.33, "lru", 0.33, 0.33)])
    assert verdict.summed_gap_closed is None and verdict.gap_closed == 0.0 and verdict.wins_everywhere


def _one_pass(requests: int, objects: int):
    def chunks():
        ids = np.arange(requests, dtype=np.int64) % objects
        yield Chunk(ids.astype(np.float64), ids, np.full(requests, 1000, dtype=np.int64),
                    np.full(requests, NO_GROUP, dtype=np.int64))
    return chunks


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="the peak is reset through Linux's /proc")
def test_each_trace_shows_its_own_peak_rss_not_the_largest_before_it():
    before = _rss_mb()  # what the process (a test worker, after other tests) holds already
    report = run_suite([SuiteTrace("large", _one_pass(500_000, 500_000), "large"),
                        SuiteTrace("small", _one_pass(1000, 100), "small")], ["lru"], [86400.0])
    large, small = (float(mb) - before for mb in re.findall(r"peak RSS (\d+) MB", report.text))
    assert large > 100 and small < large / 2  # (500,000 objects: some 150-200 MB for HTDA, LRU, Belady and PFOO-L)


def _rss_mb() -> float:
    with open("/proc/self/status") as fh:
        return float(re.search(r"VmRSS:\s+(\d+) kB", fh.read()).group(1)) / 1024


def _unreadable():
    raise TraceError("bad: not a trace")
    yield  # (a generator, as a reader's chunks are)


def _killed():
    os.kill(os.getpid(), signal.SIGKILL)  # as the OOM killer would
    yield


def test_traces_judged_in_processes_of_their_own_give_the_same_report_in_the_traces_order():
    traces = [SuiteTrace(f"t{n}", _one_pass(4000 * n, 700 * n), f"t{n}") for n in (3, 1, 2)]
    traces.insert(2, SuiteTrace("bad", _unreadable, "bad.csv"))
    lines: list[str] = []
    one = run_suite(traces, ["lru", "s3fifo"], [86400.0])
    two = run_suite(traces, ["lru", "s3fifo"], [86400.0], jobs=2, progress=lines.append)
    assert [v.name for v in two.verdicts] == ["t3", "t1", "t2"] and two.verdicts == one.verdicts
    assert two.unreadable == one.unreadable == [("bad.csv", "bad: not a trace")]

    def without_figures(text: str) -> str:  # (CPU time, peak RSS and speed differ from run to run)
        text = re.sub(r"replayed in [\d.]+ s of CPU, peak RSS \d+ MB", "", text)
        return re.sub(r"\s+[\d,]+$", "", text, flags=re.MULTILINE)

    assert without_figures(two.text) == without_figures(one.text)
    assert sorted(line.split(": ")[1] for line in lines if "replaying" in line) == ["replaying"] * 4
    assert sum("HTDA at or above" in line for line in lines) == 3 and sum("not replayed" in line for line in lines) == 1


def test_an_error_in_one_trace_ends_the_suite_at_once_and_kills_the_traces_still_replaying(tmp_path):
    pid_file = tmp_path / "slow.pid"

    def slow():
        pid_file.write_text(str(os.getpid()))
        time.sleep(120)
        yield

    def failing():
        for _ in range(200):  # (once the slow trace's process runs, so that there is one to kill)
            if pid_file.exists() and pid_file.read_text():
                break
            time.sleep(0.05)
        raise ValueError("not a trace error: a defect")
        yield

    traces = [SuiteTrace("slow", slow, "slow.csv"), SuiteTrace("failing", failing, "failing.csv")]
    started = time.monotonic()
    with pytest.raises(ValueError, match="a defect"):
        run_suite(traces, ["lru"], [86400.0], jobs=2)
    assert time.monotonic() - started < 60
    with pytest.raises(ProcessLookupError):  # (killed and reaped)
        os.kill(int(pid_file.read_text()), 0)


def test_a_trace_whose_process_dies_ends_the_suite_with_an_error():
    traces = [SuiteTrace("t", _one_pass(2000, 300), "t"), SuiteTrace("dies", _killed, "dies.csv")]
    with pytest.raises(RuntimeError, match="replaying dies.csv died before its end"):
        run_suite(traces, ["lru"], [86400.0], jobs=2)

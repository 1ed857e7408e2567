"""``htda trace info``: what a trace holds, its disorder counted rather than refused."""

from __future__ import annotations

import subprocess
import sys

import pytest

from htda.simulator.binary import OracleGeneralReader
from htda.simulator.trace import Columns, CsvTraceReader, TraceError
from htda.simulator.trace_info import TraceInfo, describe, render

from .helpers import oracle_bytes, run_cli

# /a twice, /a again with another size (another object), /b once, /c three times; one row (t=3) out of order
ROWS = [(1, "/a", 10, "d1"), (5, "/b", 20, "d1"), (3, "/a", 10, ""), (6, "/a", 11, "d2"), (7, "/c", 5, "d2"),
        (8, "/c", 5, ""), (9, "/c", 5, "d2")]


def write(path, rows=ROWS) -> None:
    path.write_text("timestamp,object_id,size_bytes,group_id\n" + "".join(f"{t},{o},{s},{g}\n" for t, o, s, g in rows))


@pytest.mark.parametrize("chunk_size", [1, 2, 100])
def test_a_trace_is_described_whole_with_its_disorder_counted(tmp_path, chunk_size):
    path = tmp_path / "t.csv"
    write(path)
    info = describe(CsvTraceReader(path, chunk_size=chunk_size))
    assert info == TraceInfo(requests=7, bytes=66, objects=4, footprint_bytes=46, requested_once=2,
                             object_sizes=(5, 10, 20), groups=2, first_time=1, last_time=9, out_of_order=1)
    assert info.hit_ratio_ceiling == pytest.approx(3 / 7) and info.byte_hit_ratio_ceiling == pytest.approx(20 / 66)


def test_the_replay_still_refuses_the_disorder_that_info_counts(tmp_path):
    path = tmp_path / "t.csv"
    write(path)
    with pytest.raises(TraceError, match="line 4: timestamp 3 is earlier than the previous row's 5"):
        list(CsvTraceReader(path))


def test_an_oracle_general_trace_out_of_order_is_described_too(tmp_path):
    path = tmp_path / "t.oracleGeneral.bin"
    path.write_bytes(oracle_bytes([(10, 7, 512), (12, 8, 512), (11, 7, 512), (9, 9, 100)]))
    info = describe(OracleGeneralReader(path, chunk_size=3))
    assert (info.requests, info.objects, info.footprint_bytes, info.out_of_order, info.groups) == (4, 3, 1124, 2, None)
    assert (info.first_time, info.last_time, info.requested_once, info.object_sizes) == (9, 12, 2, (100, 512, 512))


def test_the_report_names_what_would_stop_or_mislead_a_replay():
    info = TraceInfo(requests=1000, bytes=10**9, objects=400, footprint_bytes=5 * 10**8, requested_once=100,
                     object_sizes=(512, 2**20, 2**30), groups=None, first_time=1.7e12, last_time=1.7e12 + 3600e3,
                     out_of_order=10)
    text = render(info, "log.csv")
    assert "order: 10 requests (1.0 %) are earlier than a request before them: replay with --sort" in text
    assert "looks like milliseconds or finer since 1970 read as seconds: give --time-unit ms" in text
    assert "groups: none (every request is its own group)" in text
    assert "hits 0.6000 of the requests and 0.5000 of the bytes" in text
    assert "25.0 % of them requested once; sizes 512 B / 1.0 MB / 1.1 GB (smallest / median / largest)" in text
    dated = render(TraceInfo(1, 1, 1, 1, 1, (1, 1, 1), 3, 1738176467.0, 1738176467.0 + 7 * 86400, 0), "osdf.csv")
    assert "time: 2025-01-29 18:47:47 to 2025-02-05 18:47:47 UTC (7.0 days)" in dated
    assert "order: in time order" in dated and "--time-unit" not in dated and "groups: 3" in dated


def test_trace_info_reads_a_trace_in_other_columns_and_from_a_pipe(tmp_path):
    path = tmp_path / "cp.csv"
    path.write_text("version,time,op,size,lbn\n1,5,2a,512,42\n1,6,2a,1024,43\n1,6,2a,512,42\n")
    data = run_cli("--json", "trace", "info", str(path), "--columns", "_,timestamp,_,size_bytes,object_id")
    assert (data["requests"], data["objects"], data["footprint_bytes"], data["requested_once"]) == (3, 2, 1536, 1)
    assert data["hit_ratio_ceiling"] == pytest.approx(1 / 3)
    piped = subprocess.run([sys.executable, "-m", "htda.cli", "trace", "info", "-"], input="object_id\na\nb\na\n",
                           capture_output=True, text=True, check=True)
    assert piped.stdout.startswith("-: 3 requests, 3 B requested\n")
    assert "time: 1 to 3 s (2 s)" in piped.stdout  # ids alone: the request's number is its time
    path.write_text("version,time,op,size,lbn\n")
    with pytest.raises(TraceError, match="cp.csv: no requests"):
        describe(CsvTraceReader(path, columns=Columns.given("_,timestamp,_,size_bytes,object_id")))

"""``htda trace generate`` and ``htda simulate`` end to end on a small trace."""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from htda.coordinator.adaptive import DEFAULT_HALF_LIVES, LAYOUTS
from htda.simulator import cli
from htda.units import duration_text
from testkit.nodes import wait_until

from .helpers import restore_ctrl_c, run_cli


def test_generate_then_simulate_writes_table_and_plots(tmp_path):
    trace = tmp_path / "trace.csv"
    assert "wrote 4,000 requests" in run_cli("trace", "generate", str(trace), "--requests", "4000", "--seed", "3")
    out = tmp_path / "out"
    text = run_cli("simulate", str(trace), "--sizes", "10%,40%", "--half-lives", "5m,2h", "--out", str(out))
    assert "htda(5m)" in text and "htda(2h)" in text and "pfoo-l" in text and "belady" in text
    assert "percentages of its footprint" in text
    table = (out / "table.txt").read_text()
    assert "byte hit ratio" in table
    for png in ("hit_ratio.png", "over_time.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    data = json.loads((out / "result.json").read_text())
    assert data["requests"] == 4000
    assert {r["policy"] for r in data["results"]} == {"lru", "lfu", "arc", "s3fifo", "wtinylfu", "htda(5m)",
                                                      "htda(2h)", "htda(5m)+tinylfu", "htda(2h)+tinylfu", "belady",
                                                      "pfoo-l"}
    assert len({r["capacity_bytes"] for r in data["results"]}) == 2


def test_generate_json_gives_exact_numbers(tmp_path):
    trace = tmp_path / "trace.csv"
    said = run_cli("--json", "trace", "generate", str(trace), "--requests", "500", "--seed", "3")
    assert said["file"] == str(trace) and said["requests"] == 500 and said["seed"] == 3
    assert isinstance(said["footprint_bytes"], int) and said["footprint_bytes"] > 0


def test_json_output_of_a_synthetic_run():
    data = run_cli("--json", "simulate", "--synthetic", "--requests", "3000", "--sizes", "20G", "--half-lives", "600",
                   "--policies", "lru", "--no-belady")
    assert [r["policy"] for r in data["results"]] == ["lru", "htda(10m)", "htda(10m)+tinylfu", "pfoo-l"]
    assert data["results"][0]["capacity_bytes"] == 20 * 10**9


@pytest.mark.parametrize("argv, message", [
    (("simulate",), "give a trace file"),
    (("simulate", "--synthetic", "--sizes", "lots"), "is not a size"),
    (("simulate", "--synthetic", "--half-lives", "soon"), "is not a duration"),
    (("simulate", "--synthetic", "--policies", "fifo"), "no htda.simulator.policies plugin named 'fifo'"),
    (("simulate", "--synthetic", "--requests", "0", "--sizes", "10%"), "has no requests"),
    (("simulate", "--synthetic", "--requests", "0", "--sizes", "1G"), "has no requests"),
])
def test_bad_arguments_are_clear_errors(argv, message):
    with pytest.raises(ValueError, match=message):
        run_cli(*argv)


@pytest.mark.parametrize("size", ["inf%", "1e30%", "-5%", "nan%", "1e30", "-1G"])
def test_a_cache_size_out_of_range_is_refused_by_name(size):
    with pytest.raises(ValueError, match=f"cache size '{re.escape(size)}'"):
        run_cli("simulate", "--synthetic", "--requests", "100", f"--sizes={size}")


@pytest.mark.parametrize("option, value", [("--window", "-1"), ("--chunk", "0"), ("--window", "many"),
                                           ("--time-unit", "0"), ("--time-unit", "minutes"), ("--time-unit", "nan"),
                                           ("--sample-seed", "-1"), ("--sample-seed", "one"), ("--hysteresis", "-1"),
                                           ("--hysteresis", "0.5"), ("--hysteresis", "inf"), ("--zipf", "nan"),
                                           ("--zipf", "-1"), ("--seed", "-1"), ("--requests", "-1"),
                                           ("--analysts", "0"), ("--jobs", "0"), ("--jobs", "two")])
def test_bad_counts_are_refused_before_any_replay(option, value, capsys):
    with pytest.raises(SystemExit) as exc:
        run_cli("simulate", "--synthetic", option, value)
    assert exc.value.code == 2
    assert option in capsys.readouterr().err


def test_a_run_with_another_sample_says_which_and_the_suite_too(tmp_path):
    run_cli("trace", "generate", str(tmp_path / "t.csv"), "--requests", "2000")
    text = run_cli("simulate", str(tmp_path / "t.csv"), "--sizes", "10%", "--policies", "lru", "--no-belady",
                   "--no-bound", "--sample-seed", "3")
    assert text.splitlines()[0].endswith("htda(auto)'s shadow caches replay sample 3 of the groups")
    assert "sample 0" not in run_cli("simulate", str(tmp_path / "t.csv"), "--sizes", "10%", "--policies", "lru",
                                     "--no-belady", "--no-bound")
    suite = run_cli("simulate", "--suite", str(tmp_path), "--policies", "lru", "--sample-seed", "2")
    assert "(htda(auto)'s shadow caches replayed sample 2 of the groups.)" in suite


@pytest.mark.parametrize("text", ["", "timestamp,object_id,size_bytes,group_id\n", "\n\n"])
def test_a_trace_without_requests_is_an_error(tmp_path, text):
    trace = tmp_path / "empty.csv"
    trace.write_text(text)
    for sizes in ("10%", "1G"):
        with pytest.raises(ValueError, match="empty.csv: no requests"):
            run_cli("simulate", str(trace), "--sizes", sizes)


def test_a_byte_order_mark_is_not_data(tmp_path):
    trace = tmp_path / "bom.csv"
    trace.write_text("timestamp,object_id,size_bytes\n1,/a,10\n2,/a,10\n", encoding="utf-8-sig")
    data = run_cli("--json", "simulate", str(trace), "--sizes", "10", "--policies", "lru", "--half-lives", "1h")
    assert data["requests"] == 2
    assert next(r for r in data["results"] if r["policy"] == "lru")["hits"] == 1


def test_a_trace_replayed_by_several_processes_gives_the_same_numbers(tmp_path):
    # the trace is read once and recorded; the forked processes replay that recording at once
    trace = tmp_path / "t.csv"
    run_cli("trace", "generate", str(trace), "--requests", "6000", "--seed", "8")

    def numbers(jobs: str):
        data = run_cli("--json", "simulate", str(trace), "--sizes", "5%,20%", "--jobs", jobs, "--chunk", "700")
        return [{k: v for k, v in r.items() if k not in ("seconds", "cpu_seconds")} for r in data["results"]]

    one, three = numbers("1"), numbers("3")
    assert one == three and len(one) > 10


def test_the_suite_replays_traces_side_by_side_with_jobs(tmp_path):
    for seed in (1, 2, 3):
        run_cli("trace", "generate", str(tmp_path / f"t{seed}.csv"), "--requests", "3000", "--seed", str(seed))
    verdicts = [run_cli("--json", "simulate", "--suite", str(tmp_path), "--policies", "lru,arc", "--jobs", jobs)
                for jobs in ("1", "3")]
    assert verdicts[0] == verdicts[1] and [v["trace"] for v in verdicts[1]] == ["t1", "t2", "t3"]


def test_timestamps_in_milliseconds_replay_as_the_same_trace_in_seconds(tmp_path, capsys):
    # the half-lives are in seconds: read as seconds, milliseconds make an hour's half-life a thousand hours long
    generated, seconds, millis = tmp_path / "g.csv", tmp_path / "s.csv", tmp_path / "ms.csv"
    assert run_cli("trace", "generate", str(generated), "--requests", "3000", "--seed", "5")
    rows = [line.split(",", 1) for line in generated.read_text().splitlines()[1:]]
    stamps = [round((float(t) + 1.7e9) * 1000) for t, _ in rows]  # whole milliseconds since 1970
    seconds.write_text("".join(f"{ms * 1e-3!r},{rest}\n" for ms, (_, rest) in zip(stamps, rows)))
    millis.write_text("".join(f"{ms},{rest}\n" for ms, (_, rest) in zip(stamps, rows)))

    def hits(*argv):
        data = run_cli("--json", "simulate", *argv, "--sizes", "5%", "--policies", "lru", "--half-lives", "1h",
                       "--admission", "none", "--no-belady", "--no-bound")
        return {r["policy"]: r["hit_bytes"] for r in data["results"]}

    in_seconds = hits(str(seconds))
    assert capsys.readouterr().err == ""
    assert hits(str(millis)) != in_seconds
    said = capsys.readouterr().err
    assert "ms.csv starts at timestamp 1.7e+12, which looks like milliseconds" in said and "--time-unit ms" in said
    assert hits(str(millis), "--time-unit", "ms") == in_seconds
    assert hits(str(millis), "--time-unit", "0.001") == in_seconds
    assert capsys.readouterr().err == ""


def test_a_trace_out_of_time_order_replays_with_sort_as_the_sorted_trace(tmp_path):
    """A log that several threads wrote: stopped at its first row out of order, or with --sort replayed (alone or
    in a suite) to the hits of the same rows in time order."""
    generated, shuffled = tmp_path / "in" / "g.csv", tmp_path / "out" / "g.csv"
    generated.parent.mkdir()
    shuffled.parent.mkdir()
    run_cli("trace", "generate", str(generated), "--requests", "3000", "--seed", "9")
    header, *rows = generated.read_text().splitlines()
    jobs = [list(job) for _, job in itertools.groupby(rows, key=lambda row: row.split(",")[0])]  # one timestamp
    jittered = [job for _, job in sorted(enumerate(jobs), key=lambda pair: (pair[0] // 3, -pair[0]))]
    shuffled.write_text("\n".join([header, *itertools.chain(*jittered)]) + "\n")
    argv = ["--sizes", "5%,20%", "--policies", "lru,arc", "--no-belady", "--chunk", "500"]

    def hits(path, *more):
        data = run_cli("--json", "simulate", str(path), *argv, *more)
        return [(r["policy"], r["capacity_bytes"], r["hit_bytes"]) for r in data["results"]]

    with pytest.raises(ValueError, match="g.csv, line .* is earlier than the previous row's .*--sort"):
        hits(shuffled)
    assert hits(shuffled, "--sort") == hits(generated)
    suites = [run_cli("--json", "simulate", "--suite", str(folder), "--policies", "lru", "--sort")
              for folder in (generated.parent, shuffled.parent)]
    assert suites[0] == suites[1] and suites[0][0]["trace"] == "g"


def test_a_trace_of_ids_alone_replays_as_the_trace_of_their_numbers_and_one_byte_each(tmp_path):
    """A block trace of request order alone (a header naming object_id only) replays, in every policy and HTDA's
    adaptive rating, to the hits of the same requests written out in full: time = the request's number, size 1."""
    ids, full = tmp_path / "ids.csv", tmp_path / "full.csv"
    blocks = [f"b{(i * 7919) % 211 if i % 5 else i % 13}" for i in range(1, 4001)]
    ids.write_text("object_id\n" + "".join(f"{block}\n" for block in blocks))
    full.write_text("timestamp,object_id,size_bytes\n" + "".join(f"{i},{block},1\n" for i, block in
                                                                 enumerate(blocks, 1)))

    def results(path):
        data = run_cli("--json", "simulate", str(path), "--sizes", "5%,20%", "--policies", "lru,arc,wtinylfu",
                       "--half-lives", "auto,60")
        return ([(r["policy"], r["capacity_bytes"], r["hit_bytes"], r["staged_bytes"]) for r in data["results"]],
                data["requests"], data["footprint_bytes"])

    assert results(ids) == results(full)
    assert results(ids)[2] == len(set(blocks))  # each object one byte


def test_columns_replay_a_trace_with_other_fields_as_the_trace_cut_down_alone_and_in_a_suite(tmp_path):
    """A trace as libCacheSim keeps CloudPhysics (version,time,op,size,lbn, with its header) replays with --columns
    to the hits of the same requests cut down to timestamp,object_id,size_bytes; a wrong name is refused first."""
    raw, cut = tmp_path / "raw" / "cp.csv", tmp_path / "cut" / "cp.csv"
    raw.parent.mkdir()
    cut.parent.mkdir()
    rows = [(100 + i // 3, (i * 7919) % 97, 512 * (1 + i % 3)) for i in range(3000)]
    raw.write_text("version,time,op,size,lbn\n" + "".join(f"1,{t},2a,{size},{lbn}\n" for t, lbn, size in rows))
    cut.write_text("".join(f"{t},{lbn},{size}\n" for t, lbn, size in rows))
    argv = ["--sizes", "5%,20%", "--policies", "lru,arc", "--half-lives", "auto", "--no-belady"]
    columns = ["--columns", "_,timestamp,_,size_bytes,object_id"]

    def hits(*more):
        data = run_cli("--json", "simulate", *more, *argv)
        return [(r["policy"], r["capacity_bytes"], r["hit_bytes"]) for r in data["results"]]

    assert hits(str(raw), *columns) == hits(str(cut))
    with pytest.raises(ValueError, match="cp.csv, line 1: expected 3 or 4 fields .* --columns names the file's"):
        hits(str(raw))
    with pytest.raises(SystemExit):
        run_cli("simulate", str(raw), "--columns", "_,time,_,size_bytes,object_id")
    with pytest.raises(ValueError, match="--columns and --delimiter lay out a CSV trace; .* is read as libCacheSim's"):
        run_cli("simulate", str(raw), "--format", "oracleGeneral", *columns)
    with pytest.raises(ValueError, match="--columns and --delimiter lay out a CSV trace; .* is read as libCacheSim's"):
        run_cli("trace", "info", str(raw), "--format", "oracleGeneral", "--delimiter", "tab")
    spaced = tmp_path / "spaced" / "cp.lis"  # the same, as a block trace is often written
    spaced.parent.mkdir()
    spaced.write_text("".join(f"  {lbn}\t{size}  {t}\n" for t, lbn, size in rows))
    assert hits(str(spaced), "--delimiter", "space", "--columns", "object_id,size_bytes,timestamp") == hits(str(cut))
    suites = [run_cli("--json", "simulate", "--suite", str(raw.parent), "--policies", "lru", *columns),
              run_cli("--json", "simulate", "--suite", str(cut.parent), "--policies", "lru")]
    assert suites[0] == suites[1] and suites[0][0]["trace"] == "cp"


def test_without_groups_shows_the_group_rule_by_difference(tmp_path):
    trace = tmp_path / "trace.csv"
    run_cli("trace", "generate", str(trace), "--requests", "4000", "--seed", "6")
    ungrouped = tmp_path / "ungrouped.csv"  # the same requests, no group column
    ungrouped.write_text("".join(line.rsplit(",", 1)[0] + "\n" for line in trace.read_text().splitlines()))

    def byte_hits(path):
        data = run_cli("--json", "simulate", str(path), "--sizes", "2%", "--policies", "lru", "--half-lives", "1h",
                       "--admission", "none", "--no-belady", "--no-bound", "--without-groups")
        return {r["policy"]: r["hit_bytes"] for r in data["results"]}

    with_groups, without = byte_hits(trace), byte_hits(ungrouped)
    assert with_groups["htda(1h) no groups"] == without["htda(1h) no groups"] == without["htda(1h)"]
    assert with_groups["htda(1h)"] != with_groups["htda(1h) no groups"]  # the datasets' group rule at work
    assert with_groups["lru"] == without["lru"]


def test_generate_and_simulate_report_one_footprint(tmp_path):
    trace = tmp_path / "trace.csv"
    said = run_cli("trace", "generate", str(trace), "--requests", "3000", "--seed", "4")
    footprint = said.split("footprint ")[1].split(",")[0]
    for argv in ((str(trace),), ("--synthetic", "--requests", "3000", "--seed", "4")):
        text = run_cli("simulate", *argv, "--sizes", "10%", "--policies", "lru", "--half-lives", "1h",
                       "--no-belady", "--no-bound")
        assert f"percentages of its footprint, {footprint})" in text
        assert f"footprint {footprint}" in text.splitlines()[2]


def test_out_without_matplotlib_still_writes_the_table(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # what a plain `pip install htda` has: no matplotlib
    out = tmp_path / "out"
    text = run_cli("simulate", "--synthetic", "--requests", "2000", "--sizes", "1G,10G", "--policies", "lru",
                   "--half-lives", "1h", "--out", str(out))
    assert "matplotlib is not installed" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == ["result.json", "table.txt"]
    assert "wrote" in text and ".png" not in text


def test_the_help_names_the_coordinators_candidates_and_reads_back_as_them(capsys):
    parser = argparse.ArgumentParser()
    cli.add_parser(parser.add_subparsers())
    with pytest.raises(SystemExit):
        parser.parse_args(["simulate", "--help"])
    listed = " ".join(capsys.readouterr().out.split()).split("adaptive_half_lives; default ")[1].split(")")[0]
    assert [cli.parse_duration(h) for h in listed.split(",")] == list(DEFAULT_HALF_LIVES)
    assert [duration_text(s) for s in (90, 300, 7200, 2592000, 1.5)] == ["90s", "5m", "2h", "30d", "1.5s"]


def test_unreadable_history_is_a_clear_error(tmp_path):
    not_a_coordinator = tmp_path / "other.db"
    not_a_coordinator.write_bytes(b"")
    with pytest.raises(ValueError, match="cannot read the coordinator's history .* no such table"):
        run_cli("simulate", "--history", f"sqlite:///{not_a_coordinator}")


@pytest.mark.parametrize("url, reason", [("garbage", "Could not parse"), ("nosuch://host/db", "nosuch"),
                                         ("mysql://me:hunter2@host/db", "MySQLdb")])
def test_a_history_url_that_is_no_database_is_refused_without_its_password(url, reason):
    with pytest.raises(ValueError, match=f"--history .*not a database SQLAlchemy can open .*{reason}") as err:
        run_cli("simulate", "--history", url)
    assert "hunter2" not in str(err.value)


def test_an_out_folder_that_cannot_be_made_is_refused_before_the_replay(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("")
    monkeypatch.setattr("htda.simulator.run.simulate", lambda *a, **k: pytest.fail("replayed before --out was made"))
    with pytest.raises(ValueError, match="--out .*file/sub: Not a directory"):
        run_cli("simulate", "--synthetic", "--requests", "100", "--out", str(tmp_path / "file" / "sub"))


def test_malformed_trace_names_the_line(tmp_path):
    trace = tmp_path / "bad.csv"
    trace.write_text("1,/a,10\n2,/b\n")
    with pytest.raises(ValueError, match="line 2"):
        run_cli("simulate", str(trace), "--sizes", "100")


@pytest.mark.slow
def test_installed_htda_command(tmp_path):
    trace = tmp_path / "t.csv"
    from htda.cli import build_parser

    if "simulate" not in build_parser().format_help():
        pytest.skip("htda.simulator.cli is not in htda/cli.py's _SUBCOMMAND_MODULES yet")
    subprocess.run([sys.executable, "-m", "htda.cli", "trace", "generate", str(trace), "--requests", "2000"],
                   check=True, capture_output=True)
    done = subprocess.run([sys.executable, "-m", "htda.cli", "simulate", str(trace), "--sizes", "5%,50%",
                           "--out", str(tmp_path / "o")], check=True, capture_output=True, text=True)
    assert "byte hit ratio" in done.stdout and (tmp_path / "o" / "hit_ratio.png").exists()
    bad = subprocess.run([sys.executable, "-m", "htda.cli", "simulate", str(tmp_path / "missing.csv")],
                         capture_output=True, text=True)
    assert bad.returncode != 0 and "missing.csv" in bad.stderr


def test_ctrl_c_ends_a_run_and_its_processes_with_one_line_and_no_traceback():
    """Ctrl-C reaches the whole process group (the terminal's foreground job): the replays forked for --jobs
    end with the parent, and the run says "interrupted" once, with the shell's exit code for it."""
    run = subprocess.Popen([sys.executable, "-m", "htda.cli", "simulate", "--synthetic", "--requests", "2000000",
                            "--jobs", "2", "--no-bound"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           text=True, start_new_session=True,  # (its own group, as a terminal's job has)
                           preexec_fn=restore_ctrl_c)
    try:
        deadline = time.monotonic() + 120
        while len(_processes_of_group(run.pid)) < 3:  # (the run and its two replays)
            assert run.poll() is None and time.monotonic() < deadline, "the replays were never forked"
            time.sleep(0.1)
        os.killpg(run.pid, signal.SIGINT)
        _, stderr = run.communicate(timeout=30)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
    assert run.returncode == 130
    assert stderr.strip() == "htda: interrupted"
    # (the replays end on their own, however loaded the machine)
    wait_until(lambda: not _processes_of_group(run.pid), timeout=10, what="the replays' own exits")
    assert _processes_of_group(run.pid) == []


def _processes_of_group(pgid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # (ended meanwhile)
        if int(fields[2]) == pgid and fields[0] != "Z":
            found.append(int(stat.parent.name))
    return found


def test_a_trace_on_standard_input_replays_as_the_file_does(tmp_path):
    trace = tmp_path / "t.csv"
    run_cli("trace", "generate", str(trace), "--requests", "3000", "--seed", "4")
    args = ["--json", "simulate", "--sizes", "10%,1G", "--policies", "lru", "--no-belady"]
    from_file = subprocess.run([sys.executable, "-m", "htda.cli", *args, str(trace)], capture_output=True, check=True)
    piped = subprocess.run([sys.executable, "-m", "htda.cli", *args, "-"], input=gzip.compress(trace.read_bytes()),
                           capture_output=True, check=True)
    ratios = [[(r["policy"], r["capacity_bytes"], r["hit_bytes"]) for r in json.loads(out.stdout)["results"]]
              for out in (from_file, piped)]
    assert ratios[0] == ratios[1] and len(ratios[0]) == 2 * 10  # lru, htda(auto, 5m, 1h, 1d) with and without
    # the filter, pfoo-l, at each size


def test_suite_judges_htda_against_the_best_baseline_on_every_trace(tmp_path):
    run_cli("trace", "generate", str(tmp_path / "analysis.csv"), "--requests", "3000", "--seed", "2")
    # a scan over 50 objects repeated: LRU at any size below the loop misses everything
    rows = [f"{i},/o{i % 50},100" for i in range(1000)]
    (tmp_path / "loop.csv").write_text("timestamp,object_id,size_bytes\n" + "\n".join(rows) + "\n")
    (tmp_path / "notes.txt").write_text("not a trace")
    text = run_cli("simulate", "--suite", str(tmp_path), "--policies", "lru,s3fifo")
    assert text.index("analysis\n~~~~~~~~") < text.index("loop\n~~~~")
    assert "50 objects (an object is an (id, size) pair), footprint 5.0 kB" in text
    assert "pfoo-l bound" in text and "notes" not in text
    # the group rule's effect where there are groups (the generated datasets), and only there
    analysis, loop_section = text[:text.index("loop\n~~~~")], text[text.index("loop\n~~~~"):text.index("Summary")]
    assert "htda(auto) no groups" in analysis and "htda(1d)+tinylfu no groups" in analysis
    assert "no groups" not in loop_section
    summary = text[text.index("Summary"):]
    assert "- analysis: HTDA" in summary and "- loop: HTDA" in summary
    verdicts = {v["trace"]: v for v in run_cli("--json", "simulate", "--suite", str(tmp_path), "--policies", "lru")}
    loop = verdicts["loop"]
    assert [s["fraction"] for s in loop["sizes"]] == [0.01, 0.05, 0.1, 0.2, 0.5]
    assert all(s["best_baseline"] == "lru" and s["best_ratio"] == 0.0 for s in loop["sizes"])
    assert all(s["bound"] >= s["htda"] for s in loop["sizes"])
    gap = sum(s["bound"] - s["best_ratio"] for s in loop["sizes"])
    assert loop["summed_gap_closed"] == pytest.approx(sum(s["htda"] - s["best_ratio"] for s in loop["sizes"]) / gap)
    assert "% (of the gap summed over the sizes: " in summary


def test_suite_needs_traces(tmp_path):
    with pytest.raises(ValueError, match=r"no traces in it \(\*\.csv \(plain, .*\*\.oracleGeneral\*"):
        run_cli("simulate", "--suite", str(tmp_path))


def test_the_suite_replays_past_a_trace_it_cannot_read_and_fails_naming_it(tmp_path, capsys):
    loop = "".join(f"{i},/o{i % 50},100\n" for i in range(1000))
    (tmp_path / "a_loop.csv.gz").write_bytes(gzip.compress(loop.encode()))  # read decompressed, named "a_loop"
    (tmp_path / "b_broken.csv").write_text("1,/a,10\n0,/a,10\n")
    (tmp_path / "c_zero.csv").write_text("1,/a,0\n")
    (tmp_path / "d_loop.csv").write_text(loop)
    with pytest.raises(ValueError, match="2 of 4 traces not replayed: .*b_broken.csv, line 2: timestamp 0 is "
                                         "earlier.*c_zero.csv: no bytes requested"):
        run_cli("simulate", "--suite", str(tmp_path), "--policies", "lru", "--progress")
    out, err = capsys.readouterr()
    assert "a_loop\n~~~~~~" in out and "d_loop\n~~~~~~" in out  # the traces after the broken ones were replayed
    assert "- not replayed: " + str(tmp_path / "b_broken.csv") + ", line 2" in out
    assert "b_broken\n~~" not in out
    lines = [line for line in err.splitlines() if line.startswith("htda simulate --suite ")]
    assert lines[0] == "htda simulate --suite [1/4] a_loop: replaying"
    assert lines[1].startswith("htda simulate --suite [1/4] a_loop: HTDA at or above the best baseline at ")
    assert lines[3].startswith("htda simulate --suite [2/4] b_broken: not replayed: ")
    assert len(lines) == 8


def test_the_suite_replays_size_by_size_as_one_pass_would(tmp_path):
    from htda.simulator.run import AUTO, RunSpec, simulate
    from htda.simulator.suite import SUITE_SIZES
    from htda.simulator.trace import CsvTraceReader, footprint_bytes

    trace = tmp_path / "t.csv"
    run_cli("trace", "generate", str(trace), "--requests", "3000", "--seed", "7")
    verdict, = run_cli("--json", "simulate", "--suite", str(tmp_path), "--policies", "lru,arc", "--half-lives", "auto",
                       "--admission", "none")
    capacities = [max(1, int(f * footprint_bytes(CsvTraceReader(trace).chunks()))) for f in SUITE_SIZES]
    whole = simulate(CsvTraceReader(trace).chunks(), RunSpec(capacities, half_lives=[AUTO], baselines=["lru", "arc"],
                                                             belady=False))
    ratio = {(r.label, r.capacity): whole.byte_hit_ratio(r) for r in whole.results}
    assert [(s["htda"], s["best_ratio"], s["bound"]) for s in verdict["sizes"]] == [
        (ratio["htda(auto)", c], max(ratio["lru", c], ratio["arc", c]), ratio["pfoo-l", c]) for c in capacities]


def test_the_suite_names_the_best_candidate_alone_in_hindsight(tmp_path):
    from htda.simulator.run import AUTO, RunSpec, is_hindsight_label, simulate
    from htda.simulator.suite import SUITE_SIZES
    from htda.simulator.trace import CsvTraceReader, footprint_bytes

    trace = tmp_path / "t.csv"
    run_cli("trace", "generate", str(trace), "--requests", "3000", "--seed", "5")
    args = ("simulate", "--suite", str(tmp_path), "--policies", "lru", "--half-lives", "auto", "--admission", "none",
            "--hindsight")
    text = run_cli(*args)
    assert "htda(1d, probation)" in text and "The best candidate alone, in hindsight: 1 % htda(" in text
    assert "its best candidate alone, in hindsight, at or above the best baseline at " in text
    verdict, = run_cli("--json", *args)
    capacities = [max(1, int(f * footprint_bytes(CsvTraceReader(trace).chunks()))) for f in SUITE_SIZES]
    whole = simulate(CsvTraceReader(trace).chunks(), RunSpec(capacities, half_lives=[AUTO], baselines=["lru"],
                                                             belady=False, bound=False, hindsight=True))
    ratio = {(r.label, r.capacity): whole.byte_hit_ratio(r) for r in whole.results}
    fixed = {label for label, _ in ratio if is_hindsight_label(label)}
    assert len(fixed) == len(DEFAULT_HALF_LIVES) * len(LAYOUTS)  # every candidate in every layout
    assert [s["hindsight"]["ratio"] for s in verdict["sizes"]] == [max(ratio[f, c] for f in fixed) for c in capacities]
    with pytest.raises(ValueError, match="give --half-lives auto"):
        run_cli("simulate", "--suite", str(tmp_path), "--half-lives", "1d", "--hindsight")

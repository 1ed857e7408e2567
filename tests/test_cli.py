"""The ``htda`` admin CLI against real nodes on loopback."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from htda.cli import main
from htda.node.rest import API
from htda.protocol import coordinator as coordinator_api
from testkit.fakes import PoolStandIn
from testkit.nodes import SECRET, free_port, wait_until

CAPACITY = 64 << 20
WHEN = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d"  # a time in a table: UTC, never 1.795e+09


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def pool(inprocess_node, tmp_path):
    """A service node (locator) and a worker (cache with one 64 MiB device) that heartbeats to it."""
    service = inprocess_node("service", ["locator"])
    # high_watermark 1: the heartbeat's capacity is what the node may fill, here all of the device
    device = {"path": "cache0", "capacity": CAPACITY, "high_watermark": 1.0, "low_watermark": 1.0}
    worker = inprocess_node("worker", ["cache"], seeds=[service.url],
                            sections={"cache": {"devices": [device], "cycle": 60.0}})
    wait_until(lambda: {"service", "worker"} <= {m.name for m in service.members()}, what="worker to join")
    wait_until(lambda: service.pool.member("worker").info.get("cache"), what="the worker's cache facts")
    return service, worker


def test_status_lists_the_members(capsys, pool):
    service, _ = pool
    code, out, _ = run(capsys, "--url", service.url, "status")
    assert code == 0
    assert re.match(r"service \(HTDA \S+, up \d+\.\d s, roles locator\), healthy\n", out), out
    assert "2 pool member(s)" in out and "worker" in out
    lines = out.splitlines()
    assert lines[2].split() == ["NAME", "URL", "ROLES", "VERSION", "AGE"]
    worker = next(line for line in lines if line.startswith("worker"))
    assert re.search(r"\bcache\s+\S+\s+\d+\.\d s$", worker), worker  # ages in seconds, with their unit


def test_status_json_has_the_exact_answers(capsys, pool):
    service, _ = pool
    code, out, _ = run(capsys, "--url", service.url, "status", "--json")
    answer = json.loads(out)
    assert code == 0 and set(answer) == {"node", "pool", "health"}
    assert answer["node"]["name"] == "service" and isinstance(answer["node"]["uptime"], float)
    assert answer["health"]["status"] == "ok"
    assert {m["name"] for m in answer["pool"]["members"]} == {"service", "worker"}


def test_nodes_table_shows_cache_capacity(capsys, pool):
    service, _ = pool
    code, out, _ = run(capsys, "--url", service.url, "nodes")
    assert code == 0
    header, *rows = out.strip().splitlines()
    assert header.split()[:4] == ["NAME", "ROLES", "AGE", "USED"]
    worker_row = next(r for r in rows if r.startswith("worker"))
    assert "64.0 MiB" in worker_row
    assert next(r for r in rows if r.startswith("service")).split()[1] == "locator"


def test_nodes_json_for_scripts(capsys, pool):
    service, _ = pool
    code, out, _ = run(capsys, "--url", service.url, "nodes", "--json")
    members = {m["name"]: m for m in json.loads(out)}
    assert code == 0 and set(members) == {"service", "worker"}
    assert members["worker"]["info"]["cache"]["capacity_bytes"] == CAPACITY


def test_cache_shows_a_nodes_devices_and_staging(capsys, pool, tmp_path):
    service, _ = pool
    secret = ("--secret-file", str(tmp_path / "pool.secret"))  # the cache's listings need a signature
    code, _, err = run(capsys, "--url", service.url, "cache", "worker", "--files")
    assert code != 0 and "--secret-file" in err
    code, out, _ = run(capsys, "--url", service.url, *secret, "cache", "worker", "--files")
    assert code == 0
    assert str(tmp_path / "cache0") in out
    assert "staging: 0 active, 0 queued" in out
    assert "files (0 held)" in out
    code, _, err = run(capsys, "--url", service.url, "cache", "service")
    assert code == 2 and "does not run the cache role" in err


def test_locate_names_the_holders(capsys, pool):
    service, _ = pool
    # The service node is a pool member without a cache, so no holdings report overwrites these.
    service.client.post(f"{service.url}{API}/locator/holdings",
                        {"node": "service", "replace": True, "files": [{"lfn": "/store/a.root", "size": 300},
                                                                       {"lfn": "/store/b.root", "size": 100}]})
    code, out, _ = run(capsys, "--url", service.url, "locate", "/store/a.root", "store/c.root")
    assert code == 0
    lines = out.splitlines()
    assert lines[1].split() == ["/store/a.root", "service"]
    assert lines[2].split() == ["/store/c.root", "(none)"]
    code, out, _ = run(capsys, "--url", service.url, "--json", "locate", "/store/a.root", "/store/b.root")
    answer = json.loads(out)
    assert answer["files"] == {"/store/a.root": ["service"], "/store/b.root": ["service"]}
    assert answer["nodes"]["service"]["fraction"] == pytest.approx(1.0)


@pytest.mark.parametrize("lfn", ["../etc/passwd", "/store/../../etc/shadow", ""])
def test_bad_lfn_is_refused_before_any_request(capsys, lfn):
    code, _, err = run(capsys, "--url", f"http://127.0.0.1:{free_port()}", "locate", lfn)
    assert code == 2
    assert err.startswith("htda: ") and len(err.strip().splitlines()) == 1


def test_unreachable_node_is_one_line_and_exit_1(capsys):
    url = f"http://127.0.0.1:{free_port()}"
    code, out, err = run(capsys, "--url", url, "--timeout", "2", "nodes")
    assert code == 1 and out == ""
    assert err.startswith("htda: cannot reach peer") and url in err and len(err.strip().splitlines()) == 1


def test_missing_role_is_reported(capsys, pool):
    service, _ = pool
    code, _, err = run(capsys, "--url", service.url, "top", "files")
    assert code == 1 and "no coordinator in the pool" in err


def test_4xx_answer_is_exit_2(capsys, pool, tmp_path):
    service, _ = pool
    code, _, err = run(capsys, "--url", service.url, "get", f"{API}/cache/files")
    assert code == 2 and "HTTP 404" in err  # the contacted node has no cache
    code, _, err = run(capsys, "--url", pool[1].url, "--secret-file", str(tmp_path / "pool.secret"),
                       "get", f"{API}/cache/files?limit=0")
    assert code == 2 and "HTTP 400" in err


# -- commands whose endpoints a pool may not serve yet ------------------------------------
@pytest.fixture
def stub():
    servers = []

    def make(roles, extra=None):
        servers.append(PoolStandIn(roles, extra).start())
        return servers[-1]

    yield make
    for server in servers:
        server.stop()


@pytest.mark.parametrize("argv,what", [
    (["drain", "old"], "draining nodes"),
    (["pin", "/store/a.root", "--group", "g1"], "pinning"),
    (["unpin", "/store/a.root"], "pinning"),
    (["evict", "old", "/store/a.root"], "evicting files"),
    (["top", "files"], "top files"),
    (["top", "groups"], "top groups"),
    (["history", "/store/a.root"], "file histories"),
])
def test_missing_endpoint_says_not_supported_yet(capsys, stub, argv, what):
    old = stub(["coordinator", "cache"])
    code, _, err = run(capsys, "--url", old.url, *argv)
    assert code == 2
    assert f"this pool does not support {what} yet" in err


def test_state_changes_are_signed(capsys, stub, tmp_path):
    seen = []
    answer = {"files": 1, "pinned": 2, "unknown_groups": []}
    old = stub(["coordinator"], {coordinator_api.PIN: lambda r: seen.append(r.json) or answer})
    code, _, err = run(capsys, "--url", old.url, "pin", "/store/a.root")
    assert code == 2 and "HTTP 401" in err and "--secret-file" in err and not seen
    secret = tmp_path / "secret"
    secret.write_text(SECRET + "\n")
    secret.chmod(0o600)
    code, out, _ = run(capsys, "--url", old.url, "--secret-file", str(secret), "unpin", "/store/a.root",
                       "--group", "run1")
    assert code == 0 and out.splitlines() == ["unpinned: /store/a.root, group run1",
                                              "1 file(s) unpinned; 2 pinned in the pool now"]
    assert seen == [{"lfns": ["/store/a.root"], "groups": ["run1"], "pin": False}]


def test_pin_needs_something_to_pin(capsys, stub):
    old = stub(["coordinator"])
    code, _, err = run(capsys, "--url", old.url, "pin")
    assert code == 2 and "at least one LFN or --group" in err


# -- against a real coordinator -----------------------------------------------------------
@pytest.fixture
def coordinator(inprocess_node):
    """An all-in-one node that has seen one started job reading two files."""
    node = inprocess_node("aio", ["coordinator", "locator", "cache"],
                          sections={"cache": {"cycle": 60.0}, "coordinator": {"access_on": "start"}})
    served = {(m.upper(), p) for p, ops in node.app.openapi("t", "0")["paths"].items() for m in ops}
    if ("POST", f"{API}/coordinator/jobs") not in served:
        pytest.skip("this tree's coordinator does not serve its REST API yet")
    node.client.post(f"{node.url}{API}/coordinator/jobs", {"jobs": [
        {"job_id": "j1", "owner": "alice", "inputs": ["/store/a.root", "/store/b.root"],
         "sizes": {"/store/a.root": 2048}}]})
    node.client.post(f"{node.url}{API}/coordinator/events",
                     {"events": [{"job_id": "j1", "state": "started", "time": 1.7e9}]})
    node.served = served
    return node


def _secret_file(tmp_path) -> str:
    path = tmp_path / "cli.secret"
    path.write_text(SECRET + "\n")
    path.chmod(0o600)
    return str(path)


def test_top_files_and_groups(capsys, coordinator):
    code, out, _ = wait_until(lambda: (r := run(capsys, "--url", coordinator.url, "top", "files"))
                              [1].count("/store/") == 2 and r, what="both files rated")
    assert code == 0 and out.splitlines()[0].split()[:2] == ["LFN", "SCORE"]
    code, out, _ = run(capsys, "--url", coordinator.url, "--json", "top", "groups", "--limit", "1")
    groups = json.loads(out)["groups"]
    assert code == 0 and len(groups) == 1 and groups[0]["files"] == 2


def test_reads_from_storage_and_waiting_copies(capsys, coordinator):
    code, out, _ = run(capsys, "--url", coordinator.url, "reads")
    assert code == 0 and out.strip() == "no job reads from storage now"
    coordinator.client.post(f"{coordinator.url}{API}/coordinator/reads",
                            {"node": "w9", "lfns": ["/store/a.root"], "ttl": 60})
    code, out, _ = run(capsys, "--url", coordinator.url, "reads")
    rows = [line.split() for line in out.splitlines()]
    assert code == 0 and ["w9", "/store/a.root", "waits"] in rows
    assert "2 files' copies wait" in out  # j1, the only job of these inputs, reads /store/b.root next
    code, out, _ = run(capsys, "--url", coordinator.url, "--json", "reads")
    assert code == 0 and json.loads(out)["deferred"] == ["/store/a.root", "/store/b.root"]


def test_history_of_a_file(capsys, coordinator):
    code, out, _ = run(capsys, "--url", coordinator.url, "history", "store/a.root")
    assert code == 0
    assert "lfn: /store/a.root" in out and "size: 2.0 KiB" in out and "alice" in out
    assert "2023-11-14 22:13:20" in out  # the start event's time, shown in UTC
    assert "groups (" in out and "recent (" in out
    recent = out.splitlines()[out.splitlines().index(next(x for x in out.splitlines() if x.startswith("recent (")))
                              + 1]
    assert recent.split()[:4] == ["TIME", "JOB_ID", "STATE", "NODE"]
    code, out, _ = run(capsys, "--url", coordinator.url, "--json", "history", "/store/a.root")
    answer = json.loads(out)
    assert code == 0 and answer["size"] == 2048 and answer["recent"][0]["time"] == 1.7e9
    code, _, err = run(capsys, "--url", coordinator.url, "history", "/store/never.root")
    assert code == 2 and "HTTP 404" in err


def test_drain_and_undrain(capsys, coordinator, tmp_path):
    if ("POST", f"{API}/coordinator/nodes/{{node}}/drain") not in coordinator.served:
        pytest.skip("this tree's coordinator cannot drain nodes yet")
    secret = _secret_file(tmp_path)
    wait_until(lambda: run(capsys, "--url", coordinator.url, "--secret-file", secret, "drain", "aio")[0] == 0,
               what="the cache node to report to the coordinator")
    answer = coordinator.client.get(f"{coordinator.url}{API}/coordinator/assignments/aio")
    assert answer["draining"] is True
    code, out, _ = run(capsys, "--url", coordinator.url, "--secret-file", secret, "drain", "aio", "--undo")
    assert code == 0 and "no longer draining" in out
    code, out, _ = run(capsys, "--url", coordinator.url, "--secret-file", secret, "--json", "drain", "aio", "--undo")
    assert code == 0 and json.loads(out) == {"node": "aio", "draining": False}
    assert coordinator.client.get(f"{coordinator.url}{API}/coordinator/assignments/aio")["draining"] is False
    code, _, err = run(capsys, "--url", coordinator.url, "drain", "aio")
    assert code == 2 and "HTTP 401" in err


def test_get_takes_a_path_with_or_without_its_slash(capsys, pool):
    service, _ = pool
    for path in ("/api/v1/node", "api/v1/node"):
        code, out, err = run(capsys, "--url", service.url + "/", "get", path)
        assert code == 0, err
        assert json.loads(out)["name"] == "service"


def test_secret_file_problems_name_the_secret(capsys, tmp_path):
    missing = tmp_path / "nonexistent.secret"
    code, _, err = run(capsys, "--secret-file", str(missing), "status")
    assert code == 2 and err.strip() == f"htda: pool secret file {missing} does not exist " \
                                        f"(--secret-file or $HTDA_SECRET_FILE)"
    readable = tmp_path / "open.secret"
    readable.write_text(SECRET + "\n")
    readable.chmod(0o644)
    code, _, err = run(capsys, "--secret-file", str(readable), "status")
    assert code == 2 and "must not be readable by group or others (chmod 600)" in err


def test_new_secret_never_overwrites(capsys, tmp_path):
    path = tmp_path / "pool.secret"
    code, out, _ = run(capsys, "new-secret", str(path))
    assert code == 0 and out.strip() == f"wrote a new pool secret to {path} (mode 600); copy it to every pool member"
    first = path.read_text()
    code, _, err = run(capsys, "new-secret", str(path))
    assert code == 2 and "already exists" in err and "Errno" not in err
    assert path.read_text() == first


def test_new_secret_json(capsys, tmp_path):
    path = tmp_path / "json.secret"
    code, out, _ = run(capsys, "--json", "new-secret", str(path))
    assert code == 0 and json.loads(out) == {"file": str(path), "mode": "0600"}
    assert path.stat().st_mode & 0o777 == 0o600
    code, _, err = run(capsys, "--json", "new-secret", str(path))
    assert code == 2 and "already exists" in json.loads(err)["error"]["message"]


def test_errors_under_json_are_json(capsys):
    code, out, err = run(capsys, "--url", f"http://127.0.0.1:{free_port()}", "nodes", "--json")
    assert code == 1 and out == ""
    error = json.loads(err)["error"]
    assert error["exit_code"] == 1 and "127.0.0.1" in error["message"]


def test_tables_show_times_and_sizes_for_people(capsys):
    from htda.cli import _table

    text = _table([{"lfn": "/a", "size": 3 << 30, "used_bytes": 0, "last_seen": 1795000000.5, "score": 1.795e9}],
                  ["lfn", "size", "used_bytes", "last_seen", "score"])
    header, row = text.splitlines()
    assert header.split() == ["LFN", "SIZE", "USED", "LAST_SEEN", "SCORE"]
    assert row.split() == ["/a", "3.0", "GiB", "0", "B", "2026-11-18", "11:06:40", "1,795,000,000"]
    assert not header.endswith(" ")
    text = _table([{"node": "n", "fraction": 0.5, "age": 4000.0}], ["node", "fraction", "age"])
    assert text.splitlines()[1].split() == ["n", "50%", "1", "h", "06", "min"]


def test_documents_show_sizes_times_and_nothing_for_people():
    from htda.cli import _document

    text = _document({"lfn": "/a", "size": 2048, "node": None, "since": 1.7e9, "recent": [{"time": 1.7e9}]})
    assert text.splitlines() == ["lfn: /a", "size: 2.0 KiB", "node: (none)", "since: 2023-11-14 22:13:20",
                                 "recent (1):", "TIME", "2023-11-14 22:13:20"]


@pytest.mark.parametrize("seconds, said", [(0.42, "0.4 s"), (42.9, "42 s"), (200, "3 min 20 s"),
                                           (5 * 3600 + 130, "5 h 02 min"), (3 * 86400 + 4 * 3600 + 5, "3 d 4 h")])
def test_durations_read_as_people_say_them(seconds, said):
    from htda.cli import _duration

    assert _duration(seconds) == said


def test_pin_and_unpin_say_what_the_coordinator_did(capsys, coordinator, tmp_path):
    secret = ("--url", coordinator.url, "--secret-file", _secret_file(tmp_path))
    code, out, _ = run(capsys, *secret, "pin", "/store/a.root", "--group", "nosuchgroup")
    assert code == 0
    assert out.splitlines() == ["pinned: /store/a.root", "1 file(s) pinned; 1 pinned in the pool now",
                                "no group named 'nosuchgroup' is known to the coordinator: nothing done for it"]
    code, out, _ = run(capsys, *secret, "--json", "unpin", "/store/a.root")
    assert code == 0 and json.loads(out) == {"files": 1, "pinned": 0, "unknown_groups": []}


# -- a cache that holds copies of real ROOT files (the ``cached_node`` fixture) ---------------
@pytest.fixture
def cached(cached_node, tmp_path):
    cached_node.cli = ("--url", cached_node.url, "--secret-file", _secret_file(tmp_path))
    return cached_node


def _section(out: str, title: str) -> list[list[str]]:
    """The rows (split on blanks) of the table under the line starting with ``title``."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title)) + 1
    rows = []
    for line in lines[start:]:
        if not line or line.endswith(":") or line.startswith(("staging:", "files (")):
            break
        rows.append(line.split())
    return rows


def test_cache_tables_show_devices_copies_and_failures(capsys, cached):
    code, out, _ = run(capsys, *cached.cli, "cache", cached.name, "--files")
    assert code == 0
    devices = _section(out, f"{cached.name} at ")
    assert devices[0][:6] == ["PATH", "BACKEND", "USED", "FREE", "CAPACITY", "FILES"]
    assert devices[1][2][0].isdigit() and devices[1][3] == "KiB" and devices[1][5] in ("MiB", "GiB", "TiB")
    assert "staging: 0 active, 0 queued, 1 failed recently" in out
    failed = _section(out, "failed:")
    assert failed[0] == ["LFN", "ATTEMPT", "TIME", "ERROR"] and failed[1][0] == cached.missing
    assert re.search(WHEN, " ".join(failed[1])) and "storage" in " ".join(failed[1][4:])
    files = _section(out, "files (2 held")
    assert files[0] == ["LFN", "SIZE", "SCORE", "STAGED_AT", "DEVICE"]
    assert sorted(row[0] for row in files[1:]) == cached.lfns
    assert all(row[2] == "KiB" and re.match(WHEN, " ".join(row[4:6])) for row in files[1:])
    assert "e+" not in out
    code, out, _ = run(capsys, *cached.cli, "--json", "cache", cached.name, "--files")
    answer = json.loads(out)
    assert code == 0 and {f["lfn"] for f in answer["files"]["files"]} == set(cached.lfns)
    assert all(isinstance(f["size"], int) and isinstance(f["staged_at"], float) for f in answer["files"]["files"])
    assert answer["staging"]["failed"][0]["lfn"] == cached.missing
    assert isinstance(answer["devices"][0]["used_bytes"], int)


def test_top_locate_and_history_of_cached_files(capsys, cached):
    code, out, _ = run(capsys, *cached.cli, "top", "files")
    rows = _section("\n" + out, "")
    assert code == 0 and rows[0] == ["LFN", "SCORE", "SIZE", "NODE"]
    assert {(row[0], row[3], row[4]) for row in rows[1:] if row[0] in cached.lfns} == {
        (lfn, "KiB", cached.name) for lfn in cached.lfns}
    code, out, _ = run(capsys, *cached.cli, "locate", cached.lfns[0], "/store/elsewhere.root")
    assert code == 0
    assert out.splitlines()[-2].split() == ["NODE", "FILES", "BYTES", "FRACTION"]
    node = out.splitlines()[-1].split()
    assert node[:2] == [cached.name, "1"] and node[3] == "KiB" and node[4].endswith("%")
    code, out, _ = run(capsys, *cached.cli, "history", cached.lfns[0])
    assert code == 0 and re.search(r"^size: \d+\.\d KiB$", out, re.M) and f"node: {cached.name}" in out


def test_evict_table_and_json(capsys, cached):
    code, out, _ = run(capsys, *cached.cli, "evict", cached.name, cached.lfns[0], "/store/never.root")
    assert code == 0
    assert out.splitlines()[0] == f"{cached.name}:"
    assert [line.split(None, 1) for line in out.splitlines()[1:]] == [
        ["LFN", "RESULT"], [cached.lfns[0], "evicted, given back to the coordinator"],
        ["/store/never.root", "not held here"]]
    code, out, _ = run(capsys, *cached.cli, "--json", "evict", cached.name, cached.lfns[1])
    assert code == 0 and json.loads(out) == {"evicted": [cached.lfns[1]], "not_held": []}


def test_a_reader_that_leaves_early_ends_the_command_quietly(tmp_path):
    """`htda ... | head`: no traceback on stderr, exit 141 (128 + SIGPIPE) as a shell reports such a command."""
    trace = tmp_path / "t.csv"
    trace.write_text("object_id\n" + "".join(f"o{i % 7}\n" for i in range(100)))
    read, write = os.pipe()
    os.close(read)  # the reader left before anything was written
    with os.fdopen(write, "wb") as closed:
        done = subprocess.run([sys.executable, "-m", "htda.cli", "--json", "trace", "info", str(trace)],
                              stdout=closed, stderr=subprocess.PIPE, text=True, timeout=60)
    assert (done.returncode, done.stderr) == (141, "")

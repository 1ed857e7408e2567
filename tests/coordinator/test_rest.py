"""The coordinator's endpoints on a real node: ingest, events, assignments, releases, admin queries, errors."""

from __future__ import annotations

import time
import urllib.error
import urllib.request

import pytest

from htda.node.client import Client, HTTPStatusError
from htda.protocol.paths import COORDINATOR
from testkit.nodes import SECRET, heartbeat, wait_until

BASE = COORDINATOR


@pytest.fixture
def coordinator(inprocess_node):
    return inprocess_node("coord", ["coordinator"], sections={"coordinator": {"cycle": 0.2, "half_life": 3600.0,
                                                                              "access_on": "start"}})




def _jobs(n: int, start: int = 0) -> list[dict]:
    return [{"job_id": f"schedd#1.{i}", "owner": "alice", "inputs": [f"/store/run{i % 5}/f{k}.root" for k in range(3)],
             "cpus": 1, "memory": 2048, "submit_time": 1000.0, "task": f"schedd#{i % 5}",
             "sizes": {f"/store/run{i % 5}/f{k}.root": 1000 for k in range(3)}} for i in range(start, start + n)]


def _heartbeat_as_cache(signed: Client, node, name: str, capacity: int, started: float = 1.0) -> None:
    """A cache member's heartbeat, as the pool protocol carries it."""
    heartbeat(signed, node.url, name, ["cache"], started=started, info={"cache": {
        "capacity_bytes": capacity, "free_bytes": capacity, "used_bytes": 0, "files": 0, "staging": 0}})


def test_jobs_and_events_are_idempotent(coordinator, signed):
    url = coordinator.url + BASE
    assert signed.post(url + "/jobs", {"jobs": _jobs(20)}) == {"accepted": 20, "duplicates": 0}
    assert signed.post(url + "/jobs", {"jobs": _jobs(25)}) == {"accepted": 5, "duplicates": 20}
    events = [{"job_id": f"schedd#1.{i}", "state": "started", "time": time.time(), "node": "w1"} for i in range(25)]
    assert signed.post(url + "/events", {"events": events}) == {"accepted": 25, "duplicates": 0, "unknown": 0,
                                                                "refused": 0}
    again = events[:3] + [{"job_id": "nope", "state": "finished", "time": 1.0}]
    assert signed.post(url + "/events", {"events": again}) == {"accepted": 0, "duplicates": 3, "unknown": 1,
                                                               "refused": 0}
    info = signed.get(url + "/files/store/run0/f0.root")
    assert info["accesses"] == 5  # jobs 0, 5, 10, 15, 20: each start counted once
    assert info["size"] == 1000 and info["score"] > 0
    assert {g["kind"] for g in info["groups"]} == {"job", "task"}


def _started_and_assigned(coordinator, signed, anonymous, jobs: int, capacity: int) -> list[dict]:
    """Submit and start ``jobs`` jobs, heartbeat as cache node w1, and wait for its first assignment."""
    url = coordinator.url + BASE
    signed.post(url + "/jobs", {"jobs": _jobs(jobs)})
    signed.post(url + "/events", {"events": [{"job_id": f"schedd#1.{i}", "state": "started", "time": time.time()}
                                             for i in range(jobs)]})

    def assigned():
        _heartbeat_as_cache(signed, coordinator, "w1", capacity)
        return anonymous.get(url + "/assignments/w1")["files"]

    return wait_until(assigned, timeout=15, what="assignments for w1")


def test_a_cycle_assigns_files_to_a_cache_member(coordinator, signed, anonymous):
    url = coordinator.url + BASE
    files = _started_and_assigned(coordinator, signed, anonymous, jobs=10, capacity=10_000)
    assert len(files) == 9  # 5 groups of 3 files of 1000 bytes; 9,500 bytes of room
    assert all(f["source"] is None and f["size"] == 1000 for f in files)
    scores = [f["score"] for f in files]
    assert scores == sorted(scores, reverse=True)
    nodes = anonymous.get(url + "/nodes")["nodes"]
    assert [(n["name"], n["live"], n["assigned_files"]) for n in nodes] == [("w1", True, 9)]
    top = anonymous.get(url + "/files/top?n=2")["files"]
    assert len(top) == 2 and top[0]["node"] == "w1"
    groups = anonymous.get(url + "/groups/top?n=3")["groups"]
    assert len(groups) == 3 and groups[0]["score"] >= groups[1]["score"]

    released = files[0]["lfn"]
    assert signed.post(url + "/releases", {"node": "w1", "lfns": [released], "reason": "disk full"}) == {
        "released": 1}

    def gone():
        _heartbeat_as_cache(signed, coordinator, "w1", 10_000)
        return released not in {f["lfn"] for f in anonymous.get(url + "/assignments/w1")["files"]}

    wait_until(gone, timeout=15, what="the released file to leave w1's list")

    def back():  # a restarted cache node (new 'started', more room) may hold again what it released
        _heartbeat_as_cache(signed, coordinator, "w1", 20_000, started=2.0)
        return released in {f["lfn"] for f in anonymous.get(url + "/assignments/w1")["files"]}

    wait_until(back, timeout=15, what="the released file to come back after w1 restarted")


@pytest.mark.parametrize("path, body, fragment", [
    ("/jobs", {"jobs": [{"job_id": "j", "owner": "a", "inputs": ["/a/../../etc/passwd"]}]}, "'..' segment"),
    ("/jobs", {"jobs": [{"job_id": "j", "owner": "a"}]}, "inputs"),
    ("/jobs", {"jobs": [{"job_id": "j", "owner": "a", "inputs": [], "colour": "red"}]}, "colour"),
    ("/jobs", {"jobs": [{"job_id": "j", "owner": "a", "inputs": ["/a"], "sizes": {"/a": -1}}]}, ">= 0"),
    ("/jobs", {"jobs": "many"}, "array"),
    ("/jobs", {"jobs": [{"job_id": "j", "owner": "a", "inputs": ["/a"], "sizes": {"/a": 1 << 70}}]}, "<="),
    ("/jobs", {"jobs": [{"job_id": "j", "owner": "a", "inputs": [], "memory": 1 << 40}]}, "<="),
    ("/events", {"events": [{"job_id": "j", "state": "exploded", "time": 1.0}]}, "one of"),
    ("/events", {"events": [{"job_id": "j", "state": "started"}]}, "time"),
    ("/releases", {"node": "w1", "lfns": ["relative\x00path"]}, "control character"),
])
def test_bad_input_is_a_400(coordinator, signed, path, body, fragment):
    with pytest.raises(HTTPStatusError) as err:
        signed.post(coordinator.url + BASE + path, body)
    assert err.value.status == 400
    assert fragment in str(err.value.payload)


@pytest.mark.parametrize("path, raw", [
    ("/events", b'{"events": [{"job_id": "j", "state": "started", "time": NaN}]}'),
    ("/events", b'{"events": [{"job_id": "j", "state": "started", "time": Infinity}]}'),
    ("/jobs", b'{"jobs": [{"job_id": "j", "owner": "a", "inputs": [], "submit_time": Infinity}]}'),
    ("/jobs", b'{"jobs": [{"job_id": "j", "owner": "a", "inputs": ["/a"]'),
])
def test_non_finite_numbers_and_broken_json_are_a_400(coordinator, path, raw):
    from htda.node.auth import Signer

    target = BASE + path
    header = Signer(SECRET.encode()).for_url("POST", coordinator.url + target, raw)
    request = urllib.request.Request(coordinator.url + target, data=raw, method="POST",
                                     headers={"Authorization": header, "Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(request, timeout=10)
    assert err.value.code == 400


def test_bad_lfn_in_an_admin_query_is_a_400_and_an_unknown_one_a_404(coordinator, anonymous):
    with pytest.raises(HTTPStatusError) as err:
        anonymous.get(coordinator.url + BASE + "/files/top?n=zero")
    assert err.value.status == 400
    with pytest.raises(HTTPStatusError) as err:
        anonymous.get(coordinator.url + BASE + "/files/never/asked.root")
    assert err.value.status == 404


@pytest.mark.parametrize("path, body", [
    ("/jobs", {"jobs": []}),
    ("/events", {"events": []}),
    ("/releases", {"node": "w1", "lfns": []}),
    ("/nodes/w1/drain", {"draining": True}),
    ("/pins", {"lfns": ["/a"], "pin": True}),
    ("/cycle", {}),
])
def test_unsigned_posts_are_refused(coordinator, anonymous, path, body):
    with pytest.raises(HTTPStatusError) as err:
        anonymous.post(coordinator.url + BASE + path, body)
    assert err.value.status == 401


def test_a_wrong_secret_is_refused(coordinator):
    client = Client(b"not-the-pool-secret-not-the-pool-secret", retries=0)
    with pytest.raises(HTTPStatusError) as err:
        client.post(coordinator.url + BASE + "/jobs", {"jobs": _jobs(1)})
    client.close()
    assert err.value.status == 401


def test_too_large_batches_are_refused(inprocess_node, signed):
    node = inprocess_node("small", ["coordinator"], sections={"coordinator": {"max_batch": 3}})
    with pytest.raises(HTTPStatusError) as err:
        signed.post(node.url + BASE + "/jobs", {"jobs": _jobs(4)})
    assert err.value.status == 400 and "max_batch" in str(err.value.payload)


def test_draining_an_unknown_node_is_a_404(coordinator, signed):
    with pytest.raises(HTTPStatusError) as err:
        signed.post(coordinator.url + BASE + "/nodes/ghost/drain", {"draining": True})
    assert err.value.status == 404


def test_routes_are_in_the_openapi_document(coordinator, anonymous):
    paths = anonymous.get(coordinator.url + "/api/v1/openapi.json")["paths"]
    for path in ("/jobs", "/events", "/releases", "/assignments/{node}", "/files/top", "/groups/top",
                 "/files/{lfn}", "/nodes"):
        assert BASE + path in paths, path


def test_pins_through_rest(coordinator, signed, anonymous):
    url = coordinator.url + BASE
    signed.post(url + "/jobs", {"jobs": _jobs(5)})
    answer = signed.post(url + "/pins", {"lfns": ["/store/run0/f0.root", "//new//file.root"], "pin": True})
    assert answer == {"files": 2, "pinned": 2, "unknown_groups": []}
    assert [f["lfn"] for f in anonymous.get(url + "/pins")["files"]] == ["/new/file.root", "/store/run0/f0.root"]
    assert signed.post(url + "/pins", {"groups": ["task:schedd#0"], "pin": False})["pinned"] == 1
    with pytest.raises(HTTPStatusError) as err:
        signed.post(url + "/pins", {"lfns": ["/../x"], "pin": True})
    assert err.value.status == 400


def test_with_access_on_submit_the_job_record_is_the_access(inprocess_node):
    """The shipped in-place route runs no update/finalize hook: submissions must drive the rating."""
    node = inprocess_node("by-submit", ["coordinator"], sections={"coordinator": {"half_life": 3600.0}})
    signed = Client(SECRET.encode())
    url = node.url + "/api/v1/coordinator"
    now = time.time()
    jobs = [dict(job, submit_time=now) for job in _jobs(10)]
    assert signed.post(url + "/jobs", {"jobs": jobs})["accepted"] == 10
    info = signed.get(url + "/files/store/run0/f0.root")
    assert info["accesses"] == 2 and info["score"] > 0  # jobs 0 and 5, no event needed
    events = [{"job_id": f"schedd#1.{i}", "state": "started", "time": now, "node": "w1"} for i in range(10)]
    assert signed.post(url + "/events", {"events": events})["accepted"] == 10
    assert signed.get(url + "/files/store/run0/f0.root")["accesses"] == 2  # a start is not a second access


def test_reported_storage_reads_mark_assigned_files_deferred(coordinator, signed, anonymous):
    url = coordinator.url + BASE
    files = _started_and_assigned(coordinator, signed, anonymous, jobs=5, capacity=100_000)
    assert not any(f["defer"] for f in files)
    reading = "/store/run2/f1.root"
    assert signed.post(url + "/reads", {"node": "w2", "lfns": [reading, "/not/assigned.root"], "ttl": 30}) == {
        "reported": 2}
    files = anonymous.get(url + "/assignments/w1")["files"]
    # with the file read, the other inputs of the job that named it (read next) wait too
    assert {f["lfn"] for f in files if f["defer"]} == {f"/store/run2/f{k}.root" for k in range(3)}
    admin = anonymous.get(url + "/reads")
    assert admin["nodes"] == {"w2": sorted([reading, "/not/assigned.root"])} and reading in admin["deferred"]
    signed.post(url + "/reads", {"node": "w2", "lfns": [], "ttl": 30})  # the job finished
    assert not any(f["defer"] for f in anonymous.get(url + "/assignments/w1")["files"])
    second = {**_jobs(1, start=2)[0], "job_id": "schedd#2.0"}  # a second job over the same inputs
    signed.post(url + "/jobs", {"jobs": [second]})
    signed.post(url + "/reads", {"node": "w2", "lfns": [reading], "ttl": 30})
    assert not any(f["defer"] for f in anonymous.get(url + "/assignments/w1")["files"])  # copy it for the next ones


@pytest.mark.parametrize("body, fragment", [
    ({"node": "w1", "lfns": ["/a"]}, "ttl"),
    ({"node": "w1", "lfns": ["/a"], "ttl": 7200}, "<= 3600"),
    ({"node": "w1", "lfns": ["/a/../../etc/passwd"], "ttl": 5}, "'..' segment"),
    ({"node": "w1", "lfns": "/a", "ttl": 5}, "array"),
])
def test_bad_storage_read_reports_are_a_400(coordinator, signed, body, fragment):
    with pytest.raises(HTTPStatusError) as err:
        signed.post(coordinator.url + BASE + "/reads", body)
    assert err.value.status == 400 and fragment in str(err.value.payload)


def test_unsigned_storage_read_reports_are_refused(coordinator, anonymous):
    with pytest.raises(HTTPStatusError) as err:
        anonymous.post(coordinator.url + BASE + "/reads", {"node": "w1", "lfns": ["/a"], "ttl": 5})
    assert err.value.status == 401

"""The cache component in a real node: assignments in, validated copies, reports out, restarts."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

from htda.cache.component import READS_TTL
from htda.node.client import Client, HTTPStatusError
from htda.protocol.coordinator import AssignedFile
from testkit.clock import FakeClock
from testkit.fakes import PeerStandIn
from testkit.http import raw as raw_request
from testkit.nodes import SECRET, wait_until
from testkit.storage import make_tree


@pytest.fixture
def peer():
    standin = PeerStandIn(SECRET.encode()).start()
    yield standin
    standin.stop()


@pytest.fixture
def storage(tmp_path):
    root = tmp_path / "storage"
    files = make_tree(root, {f"/store/f{i}.dat": 50_000 + 10_000 * i for i in range(6)})
    return root, files


def cache_section(tmp_path, peer, storage_root, **extra):
    section = {"storage": "posix", "storage_location": str(storage_root),
               "devices": [{"path": str(tmp_path / "dev0")}], "coordinators": [peer.url], "locators": [peer.url],
               "cycle": 0.2, "holdings_interval": 1.0, "retry_delay": 0.1, "revalidate_interval": 0.0}
    section.update(extra)
    return {"cache": section}


def held(node) -> dict[str, dict]:
    return {f["lfn"]: f for f in Client(SECRET.encode()).get(f"{node.url}/api/v1/cache/files")["files"]}


def copy_path(tmp_path, lfn, dev="dev0"):
    return tmp_path / dev / "data" / lfn.lstrip("/")


def test_stages_assignment_and_reports(inprocess_node, peer, storage, tmp_path):
    root, files = storage
    peer.assign([(lfn, float(i)) for i, lfn in enumerate(files)])
    node = inprocess_node("c1", ["cache"], sections=cache_section(tmp_path, peer, root))
    wait_until(lambda: len(held(node)) == len(files), what="all files staged")
    for lfn, data in files.items():
        assert copy_path(tmp_path, lfn).read_bytes() == data
    wait_until(lambda: peer.held == {lfn: len(d) for lfn, d in files.items()}, what="holdings at the locator")
    client = Client(SECRET.encode())
    devices = client.get(f"{node.url}/api/v1/cache/devices")["devices"]
    assert devices[0]["used_bytes"] == sum(map(len, files.values())) and devices[0]["files"] == len(files)
    info = wait_until(lambda: node.components["cache"].heartbeat_info(), what="heartbeat info")
    assert info["files"] == len(files) and info["used_bytes"] == sum(map(len, files.values()))
    assert set(info) == {"capacity_bytes", "free_bytes", "used_bytes", "files", "staging", "groups", "groups_changed"}
    assert info["groups"] == []  # the coordinator named no group
    metrics = client.get_text(f"{node.url}/metrics") if hasattr(client, "get_text") else None
    assert metrics is None or "htda_cache_staged_bytes_total" in metrics
    staging = client.get(f"{node.url}/api/v1/cache/staging")
    assert staging["active"] == [] and staging["failed"] == []


def test_eviction_for_higher_scores_and_release(inprocess_node, peer, storage, tmp_path):
    root, files = storage
    lfns = sorted(files)
    capacity = len(files[lfns[0]]) + len(files[lfns[2]]) + 5_000  # room for 0+1 or 0+2, never all three
    peer.assign([(lfns[0], 5.0), (lfns[1], 4.0), (lfns[2], 1.0)])
    section = cache_section(tmp_path, peer, root, devices=[{"path": str(tmp_path / "dev0"), "capacity": capacity,
                                                            "high_watermark": 1.0, "low_watermark": 0.9}])
    node = inprocess_node("c2", ["cache"], sections=section)
    wait_until(lambda: set(held(node)) == {lfns[0], lfns[1]}, what="the two best files")
    wait_until(lambda: any(lfns[2] in r["lfns"] for r in peer.releases), what="release of the third")
    peer.assign([(lfns[0], 5.0), (lfns[1], 1.0), (lfns[2], 9.0)])
    wait_until(lambda: set(held(node)) == {lfns[0], lfns[2]}, what="higher score evicting the lower")
    assert not copy_path(tmp_path, lfns[1]).exists()
    evictions = Client(SECRET.encode()).get(f"{node.url}/api/v1/cache/evictions")["evictions"]
    assert evictions[0]["lfn"] == lfns[1] and evictions[0]["reason"] == "outranked"
    wait_until(lambda: lfns[1] not in peer.held and lfns[2] in peer.held, what="delta at the locator")


def test_source_change_is_restaged(inprocess_node, peer, storage, tmp_path):
    root, files = storage
    lfn = sorted(files)[0]
    peer.assign([(lfn, 1.0)])
    node = inprocess_node("c3", ["cache"], sections=cache_section(tmp_path, peer, root))
    wait_until(lambda: lfn in held(node), what="staged")
    (root / lfn.lstrip("/")).write_bytes(b"new content")
    wait_until(lambda: held(node).get(lfn, {}).get("size") == 11, what="restaged after the source changed")
    assert copy_path(tmp_path, lfn).read_bytes() == b"new content"
    (root / lfn.lstrip("/")).unlink()
    wait_until(lambda: lfn not in held(node), what="dropped after the source vanished")
    assert not copy_path(tmp_path, lfn).exists()


def test_corrupted_copy_on_disk_is_found_and_replaced(inprocess_node, peer, storage, tmp_path):
    root, files = storage
    lfn = sorted(files)[0]
    peer.assign([(lfn, 1.0)])
    node = inprocess_node("c4", ["cache"], sections=cache_section(tmp_path, peer, root, revalidate_interval=3600.0))
    wait_until(lambda: lfn in held(node), what="staged")
    path = copy_path(tmp_path, lfn)
    st = path.stat()
    with open(path, "r+b") as fh:  # bit rot: same size, same mtime, other bytes
        fh.seek(1000)
        fh.write(b"\xff" * 16)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    for entry in node.components["cache"].service.index.entries():
        entry.checked_at = 0.0  # due for its scrub now
    node.components["cache"].run_cycle()
    evictions = node.components["cache"].service.evictions
    assert any(e["reason"] == "checksum mismatch on disk" for e in evictions)
    wait_until(lambda: lfn in held(node), what="restaged")
    assert path.read_bytes() == files[lfn]


def test_restart_keeps_valid_copies_and_drops_bad_ones(tmp_path, peer, storage):
    from testkit.nodes import free_port, start_inprocess, write_config

    root, files = storage
    lfns = sorted(files)
    peer.assign([(lfn, 1.0) for lfn in lfns])
    port = free_port()
    section = cache_section(tmp_path, peer, root, verify_on_start="checksum")
    config = write_config(tmp_path, "c5", ["cache"], port, [f"http://127.0.0.1:{port}"], sections=section)
    node = start_inprocess(config)
    try:
        wait_until(lambda: len(held(node)) == len(files), what="staged")
        staged_at = {lfn: f["staged_at"] for lfn, f in held(node).items()}
    finally:
        node.stop()
    copy_path(tmp_path, lfns[0]).write_bytes(b"garbage")  # wrong size
    bad = copy_path(tmp_path, lfns[1])
    st = bad.stat()
    with open(bad, "r+b") as fh:
        fh.write(b"\0" * 8)  # same size, same mtime: only the checksum can tell
    os.utime(bad, ns=(st.st_atime_ns, st.st_mtime_ns))
    (root / lfns[2].lstrip("/")).write_bytes(b"changed at the source")
    node = start_inprocess(config)
    try:
        recovered = node.components["cache"].recovered
        assert recovered["dropped"] == 3 and recovered["kept"] == len(files) - 3
        kept = held(node)
        assert all(kept[lfn]["staged_at"] == staged_at[lfn] for lfn in lfns[3:])  # not fetched again
        wait_until(lambda: len(held(node)) == len(files), what="the dropped ones fetched again")
        for lfn in lfns:
            assert copy_path(tmp_path, lfn).read_bytes() == (root / lfn.lstrip("/")).read_bytes()
        reasons = {e["lfn"]: e["reason"] for e in node.components["cache"].service.evictions}
        assert "checksum" in reasons[lfns[1]] and "source changed" in reasons[lfns[2]]
    finally:
        node.stop()


def test_admin_input_errors(inprocess_node, peer, storage, tmp_path):
    root, _ = storage
    node = inprocess_node("c6", ["cache"], sections=cache_section(tmp_path, peer, root))
    client = Client(SECRET.encode())
    with pytest.raises(HTTPStatusError) as err:
        client.get(f"{node.url}/api/v1/cache/files?limit=lots")
    assert err.value.status == 400
    with pytest.raises(HTTPStatusError) as err:
        client.post(f"{node.url}/api/v1/cache/cycle", {"bogus": 1})
    assert err.value.status == 400
    status, _ = raw_request("POST", f"{node.url}/api/v1/cache/cycle", b"{}")
    assert status == 401
    assert client.post(f"{node.url}/api/v1/cache/cycle", {})["coordinator"] == peer.url


def test_bad_lfns_and_sources_in_an_assignment_are_skipped(inprocess_node, peer, storage, tmp_path):
    root, files = storage
    good = sorted(files)[0]
    peer.assign([{"lfn": "/../etc/passwd", "score": 9.0, "size": None, "source": None},
                 {"lfn": "/store/x\u0000y", "score": 8.0, "size": 5, "source": None},
                 {"lfn": "/store/f1.dat", "score": 7.0, "size": None, "source": "file:///etc"},
                 {"lfn": good, "score": 1.0, "size": None, "source": None}])
    node = inprocess_node("c7", ["cache"], sections=cache_section(tmp_path, peer, root))
    wait_until(lambda: good in held(node), what="the good file staged")
    time.sleep(0.5)
    assert set(held(node)) == {good}
    assert not (tmp_path / "etc").exists()


def test_small_device_filling_up_evicts_lowest_scores_and_index_stays_true(tmpfs, inprocess_node, peer, tmp_path):
    """A real 2 MiB tmpfs device: what does not fit is released; when the disk fills from elsewhere,
    the lowest-scored copies go, and the index always matches the disk."""
    root = tmp_path / "storage"
    files = make_tree(root, {f"/store/g{i}.dat": 400_000 for i in range(6)})
    mount = tmpfs(2 << 20)
    peer.assign([(lfn, 10.0 - i) for i, lfn in enumerate(sorted(files))])
    section = cache_section(tmp_path, peer, root, devices=[{"path": str(mount), "high_watermark": 0.9,
                                                            "low_watermark": 0.5}])
    node = inprocess_node("c8", ["cache"], sections=section)
    best = sorted(files)
    wait_until(lambda: set(held(node)) == set(best[:4]), what="the four best files on the small device")
    wait_until(lambda: any(set(best[4:]) <= set(r["lfns"]) for r in peer.releases), what="the rest released")

    def index_matches_disk():
        on_disk = {"/" + str(p.relative_to(mount / "data")) for p in (mount / "data").rglob("*") if p.is_file()}
        return on_disk == set(held(node))

    assert index_matches_disk()
    (mount / "hog").write_bytes(b"\0" * 300_000)  # someone else fills the file system
    wait_until(lambda: set(held(node)) == set(best[:3]), what="evictions down to the room left")
    assert index_matches_disk()
    evicted = [e["lfn"] for e in Client(SECRET.encode()).get(f"{node.url}/api/v1/cache/evictions")["evictions"]]
    assert evicted == [best[3]]
    staging = Client(SECRET.encode()).get(f"{node.url}/api/v1/cache/staging")
    assert staging["failed"] == []


def test_draining_node_fetches_nothing_new(inprocess_node, peer, storage, tmp_path):
    root, files = storage
    lfns = sorted(files)
    peer.assign([(lfns[0], 1.0)])
    node = inprocess_node("c9", ["cache"], sections=cache_section(tmp_path, peer, root))
    wait_until(lambda: set(held(node)) == {lfns[0]}, what="first file staged")
    peer.assign([(lfns[0], 1.0), (lfns[1], 2.0)], draining=True)
    result = Client(SECRET.encode()).post(f"{node.url}/api/v1/cache/cycle", {})
    assert result["stage"] == 0 and result["evict"] == 0
    assert set(held(node)) == {lfns[0]}
    peer.assign([(lfns[0], 1.0), (lfns[1], 2.0)])
    wait_until(lambda: set(held(node)) == {lfns[0], lfns[1]}, what="second file staged once draining ends")


def test_files_jobs_read_from_storage_are_reported_and_deferred_files_wait(inprocess_node, peer, storage, tmp_path):
    root, files = storage
    reading, other = "/store/f0.dat", "/store/f1.dat"
    peer.assign([{"lfn": reading, "score": 2.0, "size": None, "source": None, "defer": True},
                 {"lfn": other, "score": 1.0, "size": None, "source": None}])
    clock = FakeClock()
    node = inprocess_node("c1", ["cache"], clock=clock, sections=cache_section(tmp_path, peer, root, union="symlink",
                                                                               view=str(tmp_path / "view")))
    cache, client = node.components["cache"], Client(SECRET.encode())
    reads_loop = next(loop for loop in cache.loops() if loop.name == "htda-cache-reads")
    job = subprocess.Popen([sys.executable, "-c", "import sys; f = open(sys.argv[1], 'rb'); sys.stdin.read()",
                            str(tmp_path / "view" / reading.lstrip("/"))], stdin=subprocess.PIPE)
    try:
        wait_until(lambda: any(r["lfns"] == [reading] for r in peer.reads), what="the job's read reported")
        assert peer.reads[-1]["node"] == "c1" and peer.reads[-1]["ttl"] > 0
        with urllib.request.urlopen(f"{node.url}/metrics", timeout=10) as answer:
            metrics = answer.read().decode()
        assert 'htda_cache_job_open_files{source="storage"} 1' in metrics
        wait_until(lambda: other in held(node), what="the file nobody reads staged")
        count = len(peer.reads)
        assert reads_loop.run_once() and len(peer.reads) == count  # the same reading, just reported: not again
        clock.advance(READS_TTL / 3)  # before the coordinator's copy of the report runs out: sent again
        assert reads_loop.run_once() and len(peer.reads) > count and peer.reads[-1]["lfns"] == [reading]
        for _ in range(5):  # five more cycles
            client.post(f"{node.url}/api/v1/cache/cycle", {})
        assert reading not in held(node)
        assert cache.last_cycle["deferred"] == 1
    finally:
        job.stdin.close()
        job.wait(10)
    wait_until(lambda: peer.reads[-1]["lfns"] == [], what="an empty report once the job closed the file")
    peer.assign([(reading, 2.0), (other, 1.0)])  # the coordinator no longer defers it
    wait_until(lambda: reading in held(node), what="the deferred file staged")
    count = len(peer.reads)
    clock.advance(READS_TTL)
    assert reads_loop.run_once()
    assert len(peer.reads) == count  # nothing read from storage: nothing more to say, however long


@pytest.fixture
def quiet_node(inprocess_node, peer, storage, tmp_path):
    """A cache node whose first cycle ran (on an empty assignment) and whose next one is an hour away: the test
    drives ``service.apply`` itself."""
    root, _ = storage
    peer.assign([])
    node = inprocess_node("c1", ["cache"], sections=cache_section(tmp_path, peer, root, cycle=3600.0))
    wait_until(lambda: node.components["cache"].cycles >= 1, what="the node's first cycle")
    return node


def test_copies_in_flight_of_newly_deferred_files_give_way_unless_half_done(quiet_node, peer):
    from htda.cache.service import Assignment
    from htda.cache.staging import StagingJob

    service = quiet_node.components["cache"].service
    device = service.device.devices()[0]
    early = StagingJob("/store/f0.dat", None, device, 1.0, 1000, done_bytes=100)
    late = StagingJob("/store/f1.dat", None, device, 1.0, 1000, done_bytes=600)
    unread = StagingJob("/store/f2.dat", None, device, 1.0, 1000, done_bytes=0)
    service.jobs.update({j.lfn: j for j in (early, late, unread)})
    try:
        service.apply(Assignment([AssignedFile(lfn=j.lfn, score=1.0, size=1000, source=None, defer=j is not unread)
                                  for j in (early, late, unread)], False, peer.url, 1))
        assert early.cancel.is_set()  # 10 % done: the job reading it gets the link
        assert not late.cancel.is_set()  # 60 % done: finishing costs less than starting again
        assert not unread.cancel.is_set()  # not deferred
    finally:
        service.jobs.clear()


def test_a_copy_starts_on_the_second_assignment_naming_the_file(quiet_node, peer):
    from htda.cache.service import Assignment

    node = quiet_node
    service = node.components["cache"].service

    def apply(*files):
        return service.apply(Assignment([AssignedFile(lfn=lfn, score=1.0, size=None, source=None, defer=defer)
                                         for lfn, defer in files], False, peer.url, 1))

    first = apply(("/store/f0.dat", False), ("/store/f1.dat", True))
    assert (first["stage"], first["unconfirmed"], first["deferred"]) == (0, 1, 1)
    second = apply(("/store/f0.dat", False), ("/store/f1.dat", True))
    assert (second["stage"], second["unconfirmed"], second["deferred"]) == (1, 0, 1)
    third = apply(("/store/f0.dat", False), ("/store/f1.dat", False))  # no longer read: confirmed already
    assert third["stage"] == 1
    wait_until(lambda: {"/store/f0.dat", "/store/f1.dat"} <= set(held(node)), what="both copies")


def test_an_admin_eviction_waits_for_a_running_cycle(quiet_node, peer):
    """The evict route and a work cycle do not interleave: an eviction asked for while a cycle runs (held here in
    its pull of the assignment) happens once that cycle is done, so the cycle never plans with a copy being
    removed, stages again a file just evicted, or evicts the same copy a second time."""
    node, lfn = quiet_node, "/store/f0.dat"
    cache = node.components["cache"]
    peer.assign([(lfn, 1.0)])
    cache.run_cycle()
    cache.run_cycle()  # the second assignment naming the file starts its copy
    wait_until(lambda: lfn in held(node), what="the copy")
    answers: dict[str, dict] = {}
    cycle = threading.Thread(target=lambda: answers.update(cycle=cache.run_cycle()))
    evict = threading.Thread(target=lambda: answers.update(
        evict=Client(SECRET.encode()).post(f"{node.url}/api/v1/cache/evict", {"lfns": [lfn]})))
    peer.answering.clear()
    peer.asked.clear()
    cycle.start()
    try:
        assert peer.asked.wait(10), "the cycle did not ask for its assignment"
        evict.start()
        evict.join(0.5)
        assert evict.is_alive() and "evict" not in answers  # waiting for the cycle
        assert lfn in cache.service.index
    finally:
        peer.answering.set()
        cycle.join(10)
        if evict.ident is not None:  # started
            evict.join(10)
    assert answers["cycle"]["wanted"] == 1 and answers["cycle"]["stage"] == 0  # planned with the copy there
    assert answers["evict"] == {"evicted": [lfn], "not_held": []}
    assert lfn not in held(node)
    assert [e["reason"] for e in cache.service.evictions if e["lfn"] == lfn] == ["admin request"]


def test_a_file_missing_from_storage_is_tried_once_and_released_as_failed(inprocess_node, peer, storage, tmp_path,
                                                                          caplog):
    root, files = storage
    present = next(iter(files))
    peer.assign([("/store/absent.root", 2.0), (present, 1.0)])
    clock = FakeClock()
    node = inprocess_node("c1", ["cache"], clock=clock, sections=cache_section(tmp_path, peer, root))
    wait_until(lambda: any("/store/absent.root" in r["lfns"] for r in peer.releases), what="the missing file released")
    release = next(r for r in peer.releases if "/store/absent.root" in r["lfns"])
    assert release["reason"] == "copies failed" and present not in release["lfns"]
    wait_until(lambda: present in held(node), what="the present file staged")
    for _ in range(5):  # five more cycles, each past the retry_delay of 0.1 s: no second attempt
        clock.advance(0.2)
        Client(SECRET.encode()).post(f"{node.url}/api/v1/cache/cycle", {})
    attempts = [r.getMessage() for r in caplog.records if "/store/absent.root" in r.getMessage()
                and "staging" in r.getMessage()]
    assert attempts == [f"staging /store/absent.root failed, not retrying: /store/absent.root: no such file in "
                        f"storage {root}"]


def test_a_missing_storage_root_is_named_as_such(inprocess_node, peer, tmp_path, caplog):
    peer.assign([("/store/a.root", 1.0)])
    inprocess_node("c1", ["cache"], sections=cache_section(tmp_path, peer, tmp_path / "not-mounted"))
    wait_until(lambda: any("storage root" in r.getMessage() for r in caplog.records), what="the failure logged")
    message = next(r.getMessage() for r in caplog.records if "storage root" in r.getMessage())
    assert message == (f"staging /store/a.root failed (attempt 1 of 3): storage root "
                       f"{tmp_path / 'not-mounted'} does not exist (not mounted?)")

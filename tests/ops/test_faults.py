"""Faults: kill -9 of each role in turn while jobs are reported; the pool recovers by itself
(a supervisor restarts the process, as systemd's Restart=on-failure does) and no acknowledged
job record is lost."""

from __future__ import annotations

import time

import pytest

from htda.node.client import ClientError
from testkit.nodes import NodeProcess, free_port, wait_until, write_config

from .helpers import load_bench, unhandled_errors

FILES = 60
SIZE = 4096
CAPACITY = FILES * SIZE * 2 // 3  # each worker holds at most two thirds of the files: both get some


def _storage(root, run: str) -> None:
    for i in range(FILES):
        path = root / "store" / "load" / run / f"file{i:05d}.dat"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(bytes([i % 256]) * SIZE)


def _worker(tmp_path, name: str, *seeds: str) -> NodeProcess:
    port = free_port()
    cache = {"storage_location": str(tmp_path / "storage"), "cycle": 0.5, "holdings_interval": 2.0,
             "devices": [{"path": f"cache-{name}", "capacity": CAPACITY}], "retry_delay": 0.5}
    config = write_config(tmp_path, name, ["cache"], port, list(seeds), sections={"cache": cache})
    return NodeProcess(config).start()


def _holders(service: NodeProcess, lfns: list[str]) -> set[str]:
    return set(service.post("/api/v1/locator/lookup", {"lfns": lfns})["nodes"])


def _restart(node: NodeProcess) -> None:
    """What systemd does after a crash: start the same config again."""
    node.start()


@pytest.mark.slow
def test_kill_each_role_during_load(tmp_path):
    bench = load_bench()
    run = "faults"
    _storage(tmp_path / "storage", run)
    service = bench.service_node(tmp_path, cycle=0.5).start()
    workers = [_worker(tmp_path, name, service.url) for name in ("w1", "w2")]
    # heartbeating members without room, so the real workers get the files
    members = bench.SimulatedMembers(service.url, 10, interval=0.5, expiry=3.0, capacity=0).start()
    reporter = bench.JobReporter(service.url, rate=200, batch=10, files=FILES, run=run, size=SIZE, timeout=3.0)
    lfns = reporter.lfns
    try:
        reporter.start()
        wait_until(lambda: {"w1", "w2"} <= _holders(service, lfns), timeout=30,
                   what="both cache workers to hold files")

        # 1. a cache worker dies and is restarted: it rejoins and reports its copies again
        w1 = workers[0]
        first_start = next(m["started"] for m in service.get("/api/v1/pool")["members"] if m["name"] == "w1")
        w1.kill()
        wait_until(lambda: "w1" not in _holders(service, lfns), timeout=10,
                   what="the locator to drop the dead worker's copies")
        _restart(w1)
        wait_until(lambda: any(m["name"] == "w1" and m["started"] != first_start
                               for m in service.get("/api/v1/pool")["members"]), timeout=10,
                   what="the restarted worker to rejoin")
        wait_until(lambda: "w1" in _holders(service, lfns), timeout=15,
                   what="the restarted worker's copies to be located again")

        # 2. the service node (coordinator + locator) dies and is restarted
        acked_before = len(reporter.acked)
        service.kill()
        time.sleep(1.0)
        _restart(service)
        wait_until(lambda: {"w1", "w2"} <= {m["name"] for m in service.get("/api/v1/pool")["members"]},
                   timeout=10, what="the workers to rejoin the restarted service node")
        wait_until(lambda: {"w1", "w2"} <= _holders(service, lfns), timeout=15,
                   what="the locator to learn the workers' copies again")
        wait_until(lambda: service.get("/api/v1/coordinator/assignments/w2")["files"], timeout=15,
                   what="the coordinator to assign files again")
        wait_until(lambda: len(reporter.acked) > acked_before + 200, timeout=15,
                   what="job reports to be acknowledged again")
        reporter.stop(drain=15.0)
        checked = bench.verify(service.url, reporter)
        result = reporter.summary()
        alive = [n.name for n in (service, *workers) if n.proc.poll() is None]
        bugs = [line for n in (service, *workers) for line in unhandled_errors(n)]
    finally:
        reporter.stop(drain=0.0)
        members.stop()
        for node in (*workers, service):
            node.stop()
    print(f"faults: {result}, check {checked}")
    assert alive == ["service", "w1", "w2"]
    assert checked["lost_jobs"] == 0 and checked["duplicates"] == len(reporter.acked) > 1000
    assert not checked["files_missing_accesses"]
    assert not bugs, "\n".join(bugs[:10])


def _copies(worker: NodeProcess) -> set[str]:
    return {f["lfn"] for f in worker.get("/api/v1/cache/files?limit=100000")["files"]}


@pytest.mark.slow
def test_coordinator_and_locator_on_their_own_nodes_die_one_at_a_time(tmp_path):
    """Each role alone dies: the other keeps serving, cache nodes keep their copies, nothing acknowledged is lost."""
    bench = load_bench()
    run = "split"
    _storage(tmp_path / "storage", run)
    coordinator_port = free_port()
    seed = f"http://127.0.0.1:{coordinator_port}"
    coordinator = NodeProcess(write_config(tmp_path, "coordinator", ["coordinator"], coordinator_port, [seed],
                                           sections={"coordinator": {"cycle": 0.5}})).start()
    locator = NodeProcess(write_config(tmp_path, "locator", ["locator"], free_port(), [seed])).start()
    workers = [_worker(tmp_path, name, seed) for name in ("w1", "w2")]
    reporter = bench.JobReporter(seed, rate=200, batch=10, files=FILES, run=run, size=SIZE, timeout=3.0)
    lfns = reporter.lfns
    nodes = (coordinator, locator, *workers)
    try:
        reporter.start()
        wait_until(lambda: {"w1", "w2"} <= _holders(locator, lfns), timeout=30,
                   what="both cache workers' copies at the locator")

        # 1. the locator dies: jobs are still acknowledged and copies kept; restarted, it learns them all again
        held = {w.name: _copies(w) for w in workers}
        acked = len(reporter.acked)
        locator.kill()
        wait_until(lambda: len(reporter.acked) > acked + 200, timeout=15,
                   what="job reports acknowledged while the locator is down")
        assert all(_copies(w) >= held[w.name] for w in workers)  # nothing evicted for want of a locator
        _restart(locator)
        wait_until(lambda: {"w1", "w2"} <= _holders(locator, lfns), timeout=15,
                   what="the restarted locator to learn the workers' copies")

        # 2. the coordinator dies: lookups still answer and copies stay; restarted, it assigns again
        held = {w.name: _copies(w) for w in workers}
        acked = len(reporter.acked)
        coordinator.kill()
        time.sleep(2.0)  # four cache cycles without a coordinator
        assert {"w1", "w2"} <= _holders(locator, lfns)
        assert all(_copies(w) >= held[w.name] for w in workers)
        _restart(coordinator)
        wait_until(lambda: {"locator", "w1", "w2"} <= {m["name"] for m in coordinator.get("/api/v1/pool")["members"]},
                   timeout=10, what="the others to rejoin the restarted coordinator")
        wait_until(lambda: coordinator.get("/api/v1/coordinator/assignments/w2")["files"], timeout=15,
                   what="the coordinator to assign files again")
        wait_until(lambda: len(reporter.acked) > acked + 200, timeout=15,
                   what="job reports acknowledged again")
        reporter.stop(drain=15.0)
        checked = bench.verify(seed, reporter)
        alive = [n.name for n in nodes if n.proc.poll() is None]
        bugs = [line for n in nodes for line in unhandled_errors(n)]
    finally:
        reporter.stop(drain=0.0)
        for node in reversed(nodes):
            node.stop()
    assert alive == ["coordinator", "locator", "w1", "w2"]
    assert checked["lost_jobs"] == 0 and checked["duplicates"] == len(reporter.acked) > 400
    assert not checked["files_missing_accesses"]
    assert not bugs, "\n".join(bugs[:10])


def _submit(coordinators: list[NodeProcess], i: int, run: str) -> bool:
    """Job ``i`` (reading file ``i``) to the first coordinator that takes it, as the submit agent sends."""
    lfn = f"/store/load/{run}/file{i:05d}.dat"
    job = {"job_id": f"{run}#{i}.0", "owner": "alice", "inputs": [lfn], "sizes": {lfn: SIZE}}
    for node in coordinators:
        try:
            node.post("/api/v1/coordinator/jobs", {"jobs": [job]})
            return True
        except ClientError:
            continue
    return False


@pytest.mark.slow
def test_two_of_each_service_role_lose_one_of_each(tmp_path):
    """Two coordinators (one database; one leads) and two locators; kill -9 the leader and a locator at once:
    the standby takes over with every acknowledged job and places the files of new ones, the other locator
    answers with both workers' copies, and no survivor logs an unhandled error."""
    run = "pairs"
    _storage(tmp_path / "storage", run)
    ports = [free_port(), free_port()]
    seeds = [f"http://127.0.0.1:{port}" for port in ports]
    shared = {"coordinator": {"database": f"sqlite:///{tmp_path / 'shared.db'}", "cycle": 0.5,
                              "takeover_poll": 0.5}}
    coordinators = [NodeProcess(write_config(tmp_path, name, ["coordinator"], port, seeds, sections=shared)).start()
                    for name, port in zip(("c1", "c2"), ports)]
    locators = [NodeProcess(write_config(tmp_path, name, ["locator"], free_port(), seeds)).start()
                for name in ("l1", "l2")]
    workers = [_worker(tmp_path, name, *seeds) for name in ("w1", "w2")]
    nodes = [*coordinators, *locators, *workers]
    lfns = [f"/store/load/{run}/file{i:05d}.dat" for i in range(FILES)]
    first, later = range(FILES // 2), range(FILES // 2, FILES)
    try:
        assert [n.get("/api/v1/node")["roles"] for n in coordinators] == [["coordinator"], []]
        acked = [i for i in first if _submit(coordinators, i, run)]
        assert acked == list(first)
        for locator in locators:
            wait_until(lambda locator=locator: {"w1", "w2"} <= _holders(locator, lfns[:FILES // 2]), timeout=30,
                       what=f"both workers' copies at {locator.name}")

        coordinators[0].kill()
        locators[0].kill()
        wait_until(lambda: coordinators[1].get("/api/v1/node")["roles"] == ["coordinator"], timeout=10,
                   what="the standby coordinator to take over")
        assert {"w1", "w2"} <= _holders(locators[1], lfns[:FILES // 2])
        acked += [i for i in later if _submit(coordinators, i, run)]
        assert acked == list(range(FILES))
        for i in acked:
            assert coordinators[1].get(f"/api/v1/coordinator/files{lfns[i]}")["accesses"] == 1
        wait_until(lambda: len(set(_held_files(locators[1], lfns[FILES // 2:]))) >= len(later) // 2, timeout=30,
                   what="files of jobs sent after the takeover to be copied")
        survivors = [coordinators[1], locators[1], *workers]
        alive = [n.name for n in survivors if n.proc.poll() is None]
        bugs = [line for n in survivors for line in unhandled_errors(n)]
    finally:
        for node in reversed(nodes):
            node.stop()
    assert alive == ["c2", "l2", "w1", "w2"]
    assert not bugs, "\n".join(bugs[:10])


def _held_files(locator: NodeProcess, lfns: list[str]) -> list[str]:
    """The LFNs of ``lfns`` some node holds, by the locator's lookup of each."""
    return [lfn for lfn in lfns if locator.post("/api/v1/locator/lookup", {"lfns": [lfn]})["nodes"]]

"""The coordinator in a pool: departures, restarts (SIGKILL), and PostgreSQL as its database."""

from __future__ import annotations

import threading
import time

import pytest

from htda.node.client import Client
from htda.protocol.paths import COORDINATOR
from testkit.nodes import SECRET, wait_until

BASE = COORDINATOR


class CacheHeartbeats(threading.Thread):
    """Heartbeats as cache members (what a cache node's heartbeat carries) until ``stop(name)``."""

    def __init__(self, client: Client, node_url: str, capacities: dict[str, int]):
        super().__init__(daemon=True)
        self.client, self.node_url, self.capacities = client, node_url, dict(capacities)
        self.done = threading.Event()

    def beat(self) -> None:
        for name, capacity in list(self.capacities.items()):
            self.client.post(self.node_url + "/api/v1/pool/heartbeat", {
                "name": name, "url": f"http://127.0.0.1:9/{name}", "roles": ["cache"], "version": "test",
                "started": 1.0, "info": {"cache": {"capacity_bytes": capacity, "free_bytes": capacity,
                                                   "used_bytes": 0, "files": 0, "staging": 0}}})

    def run(self) -> None:
        while not self.done.wait(0.3):
            try:
                self.beat()
            except Exception:  # noqa: BLE001 - the node may be restarting; beat again next round
                pass

    def stop(self, name: str) -> None:
        self.capacities.pop(name)


@pytest.fixture
def signed():
    client = Client(SECRET.encode(), retries=0)
    yield client
    client.close()


def _load(client: Client, url: str, groups: int = 6) -> None:
    jobs, events = [], []
    for g in range(groups):
        inputs = [f"/store/g{g}/f{i}.root" for i in range(2)]
        jobs.append({"job_id": f"s#{g}.0", "owner": "alice", "inputs": inputs, "task": f"s#{g}",
                     "sizes": dict.fromkeys(inputs, 100)})
        events.append({"job_id": f"s#{g}.0", "state": "started", "time": time.time() - 3600 * (groups - g)})
    client.post(url + "/jobs", {"jobs": jobs})
    client.post(url + "/events", {"events": events})


def _lists(client: Client, url: str, *names: str) -> dict[str, list[str]]:
    return {name: [f["lfn"] for f in client.get(f"{url}/assignments/{name}")["files"]] for name in names}


def test_files_of_a_departed_cache_node_go_to_the_others(inprocess_node, signed):
    node = inprocess_node("coord", ["coordinator"], sections={"coordinator": {"cycle": 0.3}}, expiry=2.0)
    url = node.url + BASE
    _load(signed, url)
    beats = CacheHeartbeats(signed, node.url, {"w1": 1500, "w2": 1500})  # either one alone holds all 12 files
    beats.beat()
    beats.start()
    try:
        both = wait_until(lambda: (lists := _lists(signed, url, "w1", "w2")) and all(lists.values()) and lists,
                          timeout=15, what="files on both cache nodes")
        assert len(both["w1"]) + len(both["w2"]) == 12
        beats.stop("w2")
        after = wait_until(lambda: len(files := _lists(signed, url, "w1")["w1"]) == 12 and files, timeout=15,
                           what="w2's files to move to w1")
        assert set(both["w2"]) <= set(after) and set(both["w1"]) <= set(after)
        assert _lists(signed, url, "w2")["w2"] == []
    finally:
        beats.done.set()


@pytest.mark.slow
def test_a_killed_coordinator_comes_back_with_the_same_assignments(node_factory, signed):
    coordinator = node_factory("coord", ["coordinator"], sections={"coordinator": {"cycle": 0.5}}, expiry=5.0)
    url = coordinator.url + BASE
    _load(signed, url)
    beats = CacheHeartbeats(signed, coordinator.url, {"w1": 500, "w2": 500})
    beats.beat()
    beats.start()
    try:
        before = wait_until(lambda: (lists := _lists(signed, url, "w1", "w2")) and all(lists.values()) and lists,
                            timeout=20, what="assignments before the kill")
        cycle = signed.get(url + "/assignments/w1")["cycle"]
        coordinator.kill()
        coordinator.start()

        def next_cycle():
            answer = signed.get(url + "/nodes")
            return answer["cycle"] > cycle and answer

        wait_until(next_cycle, timeout=20, what="a cycle of the restarted coordinator")
        assert _lists(signed, url, "w1", "w2") == before
    finally:
        beats.done.set()


def test_the_coordinator_runs_on_postgresql(database, inprocess_node, signed):
    url_, schema = database
    # cycles only when asked: a periodic one between the loads and the heartbeat (on a loaded machine the loads
    # can take longer than the default 30 s) would re-key the groups with no node to place them on
    node = inprocess_node("coord", ["coordinator"],
                          sections={"coordinator": {"database": url_, "db_schema": schema or "", "cycle": 600.0}})
    url = node.url + BASE
    _load(signed, url)
    _load(signed, url)  # everything again: all duplicates
    beats = CacheHeartbeats(signed, node.url, {"w1": 10_000})
    beats.beat()
    report = signed.post(url + "/cycle", {})["cycle"]
    assert report["placed"] == 12 and report["groups_rekeyed"] == 12
    info = signed.get(url + "/files/store/g5/f0.root")
    assert info["accesses"] == 1 and info["node"] == "w1"

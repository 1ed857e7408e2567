"""End to end with the real coordinator and locator: jobs in, copies staged, the locator answers."""

from __future__ import annotations

import time

import pytest

from htda.node.client import Client, HTTPStatusError
from testkit.nodes import SECRET, wait_until
from testkit.storage import make_tree


@pytest.mark.slow
def test_coordinator_assigns_cache_stages_locator_answers(inprocess_node, tmp_path):
    root = tmp_path / "storage"
    files = make_tree(root, {f"/store/run1/f{i}.dat": 40_000 + i for i in range(5)})
    service = inprocess_node("svc", ["coordinator", "locator"], sections={"coordinator": {"cycle": 0.3}})
    cache = {"storage": "posix", "storage_location": str(root), "devices": [{"path": str(tmp_path / "dev0")}],
             "cycle": 0.3, "holdings_interval": 1.0}
    worker = inprocess_node("w1", ["cache"], seeds=[service.url], sections={"cache": cache})
    client = Client(SECRET.encode())

    def capacity_seen():
        members = client.get(f"{service.url}/api/v1/pool")["members"]
        return any(m["name"] == "w1" and m.get("info", {}).get("cache", {}).get("capacity_bytes") for m in members)

    wait_until(capacity_seen, what="the coordinator to see the cache's capacity")
    now = time.time()
    jobs = [{"job_id": f"j{k}", "owner": "alice", "inputs": sorted(files), "submit_time": now,
             "sizes": {lfn: len(d) for lfn, d in files.items()}} for k in range(3)]
    client.post(f"{service.url}/api/v1/coordinator/jobs", {"jobs": jobs})
    client.post(f"{service.url}/api/v1/coordinator/events",
                {"events": [{"job_id": j["job_id"], "state": "started", "time": now} for j in jobs]})
    wait_until(lambda: client.get(f"{worker.url}/api/v1/cache/files")["total"] == len(files), timeout=20,
               what="the worker to stage its assignment")
    for lfn, data in files.items():
        assert (tmp_path / "dev0/data" / lfn.lstrip("/")).read_bytes() == data

    def located():
        answer = client.post(f"{service.url}/api/v1/locator/lookup", {"lfns": sorted(files)})
        return all(answer["files"].get(lfn) == ["w1"] for lfn in files) and answer

    answer = wait_until(located, what="the locator to know the worker's holdings")
    assert answer["nodes"]["w1"]["fraction"] == pytest.approx(1.0)

    # An admin evicts one copy: it leaves the disk, the view and the locator, goes back to the
    # coordinator, and is not staged again on this node while the coordinator places it elsewhere.
    victim = sorted(files)[0]
    answer = client.post(f"{worker.url}/api/v1/cache/evict", {"lfns": [victim, "/store/never.dat"]})
    assert answer == {"evicted": [victim], "not_held": ["/store/never.dat"]}
    assert not (tmp_path / "dev0/data" / victim.lstrip("/")).exists()
    wait_until(lambda: client.post(f"{service.url}/api/v1/locator/lookup", {"lfns": [victim]})["files"]
               .get(victim, []) == [], what="the locator to forget the evicted copy")
    client.post(f"{worker.url}/api/v1/cache/cycle", {})
    assert not (tmp_path / "dev0/data" / victim.lstrip("/")).exists()
    held = {f["lfn"] for f in client.get(f"{worker.url}/api/v1/cache/files")["files"]}
    assert held == set(files) - {victim}
    with pytest.raises(HTTPStatusError) as err:
        client.post(f"{worker.url}/api/v1/cache/evict", {"lfns": ["/store/../etc/passwd"]})
    assert err.value.status == 400

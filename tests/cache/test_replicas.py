"""Replicas end to end: a real coordinator gives a hot group more copies, and real cache nodes copy them from
the node that holds it, over the pool, without reading storage again."""

from __future__ import annotations

from pathlib import Path

from htda.node.client import Client
from testkit.nodes import SECRET, wait_until
from testkit.storage import make_tree

from .test_peers import watch_storage

SIZE = 50_000
GROUPS = {"hot": 9, "c0": 1, "c1": 1, "c2": 1}  # jobs per group: hot draws 3/4 of them, 3 nodes' worth of 3


def _files(group: str) -> list[str]:
    return [f"/store/r/{group}/f{i}.dat" for i in range(3)]


def test_a_hot_group_is_copied_to_three_nodes_from_its_holder_not_from_storage(inprocess_node, tmp_path: Path):
    root = tmp_path / "storage"
    make_tree(root, {lfn: SIZE for group in GROUPS for lfn in _files(group)})
    service = inprocess_node("svc", ["coordinator", "locator"],
                             sections={"coordinator": {"cycle": 0.2, "max_copies": 3}})
    caches = []
    for name in ("w1", "w2", "w3"):
        cache = {"storage": "posix", "storage_location": str(root), "cycle": 0.2, "holdings_interval": 1.0,
                 "retry_delay": 0.2, "report_reads": False,
                 "devices": [{"path": str(tmp_path / f"dev-{name}"), "capacity": 40 * SIZE}]}
        caches.append(inprocess_node(name, ["cache"], seeds=[service.url], sections={"cache": cache}))
    wait_until(lambda: len(service.members("cache")) == 3, what="three cache nodes in the pool")
    reads = {node.name: watch_storage(node.components["cache"].default_storage) for node in caches}
    jobs = [{"job_id": f"{group}#{j}.0", "owner": "alice", "inputs": _files(group),
             "sizes": dict.fromkeys(_files(group), SIZE)} for group, count in GROUPS.items() for j in range(count)]
    client = Client(SECRET.encode(), retries=0)
    client.post(f"{service.url}/api/v1/coordinator/jobs", {"jobs": jobs})

    def holders(lfn: str) -> set[str]:
        return set(client.post(f"{service.url}/api/v1/locator/lookup", {"lfns": [lfn]})["nodes"])

    wait_until(lambda: all(holders(lfn) == {"w1", "w2", "w3"} for lfn in _files("hot")), timeout=20,
               what="every file of the hot group on all three nodes")
    # each file of the hot group came from storage once (its first copy), the other two copies from a peer
    for lfn in _files("hot"):
        assert holders(lfn) == {"w1", "w2", "w3"}
    storage_bytes = sum(n for node_reads in reads.values() for _, n in node_reads)
    assert storage_bytes == len(GROUPS) * 3 * SIZE  # every file of every group once, the replicas never
    peer_copied = sum(v for node in caches for _, v in node.components["cache"].service.m_peer_copied.samples())
    assert peer_copied == 2 * 3 * SIZE
    # a cold group's bytes are counted as they are read: its copy may still be validating or unreported
    cold = [lfn for group in ("c0", "c1", "c2") for lfn in _files(group)]
    wait_until(lambda: all(holders(lfn) for lfn in cold), timeout=20, what="every file of the cold groups held")
    assert {lfn: len(holders(lfn)) for lfn in cold} == dict.fromkeys(cold, 1)  # one job each: no replica
    client.close()

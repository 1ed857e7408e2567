"""Two coordinators on one database: one leads, the other stands by and takes over after a kill -9, losing no
acknowledged job (real htda-node processes, real SQLite file locks and PostgreSQL advisory locks)."""

from __future__ import annotations

import threading
import time

import pytest

from htda.node.client import ClientError, HTTPStatusError
from testkit.nodes import NodeProcess, free_port, wait_until, write_config

POLL = 0.3


def _roles(node: NodeProcess) -> list[str]:
    return node.get("/api/v1/node")["roles"]


def _job(i: int) -> dict:
    return {"job_id": f"ha#{i}.0", "owner": "alice", "inputs": [f"/store/ha/job{i}.root"]}


def _pair(tmp_path, database) -> tuple[NodeProcess, NodeProcess]:
    url, schema = database
    section = {"coordinator": {"database": url, "db_schema": schema or "", "cycle": 0.5, "takeover_poll": POLL}}
    ports = free_port(), free_port()
    seeds = [f"http://127.0.0.1:{port}" for port in ports]
    a = NodeProcess(write_config(tmp_path / "a", "a", ["coordinator"], ports[0], seeds, sections=section)).start()
    b = NodeProcess(write_config(tmp_path / "b", "b", ["coordinator"], ports[1], seeds, sections=section)).start()
    return a, b


@pytest.mark.slow
def test_a_standby_takes_over_after_kill_9_and_keeps_every_acknowledged_job(tmp_path, database):
    a, b = _pair(tmp_path, database)
    acked: list[int] = []
    try:
        assert "coordinator" in _roles(a) and "coordinator" not in _roles(b)
        with pytest.raises(HTTPStatusError) as refused:
            b.post("/api/v1/coordinator/jobs", {"jobs": [_job(-1)]})
        assert refused.value.status == 503 and "standby" in str(refused.value)
        wait_until(lambda: {m["name"]: m["roles"] for m in b.get("/api/v1/pool")["members"]}.get("a") ==
                   ["coordinator"], what="the standby to see the leader's role")

        stop = threading.Event()

        def submit() -> None:
            i = 0
            while not stop.is_set():
                try:
                    a.post("/api/v1/coordinator/jobs", {"jobs": [_job(i), _job(i + 1)]})
                    acked.extend((i, i + 1))
                except ClientError:
                    pass  # the leader is gone: not acknowledged, the sender keeps it (the submit agent does)
                i += 2

        sender = threading.Thread(target=submit)
        sender.start()
        wait_until(lambda: len(acked) >= 100, what="jobs acknowledged by the leader")
        a.kill()
        killed = time.monotonic()
        stop.set()
        sender.join(10)
        wait_until(lambda: "coordinator" in _roles(b), timeout=10, what="the standby to take over")
        took = time.monotonic() - killed
        assert took < POLL + 5.0
        for i in acked:
            info = b.get(f"/api/v1/coordinator/files/store/ha/job{i}.root")
            assert info["lfn"] == f"/store/ha/job{i}.root" and info["accesses"] == 1, info
        b.post("/api/v1/coordinator/jobs", {"jobs": [_job(10**6)]})  # and it serves
    finally:
        a.kill()
        b.stop()

"""The shipped worker snippet's startd cron job, run by real startds."""

from __future__ import annotations

import pytest

from testkit.nodes import wait_until

pytestmark = pytest.mark.slow


def test_each_startd_publishes_its_nodes_htda_attributes(htda_pool):
    """Both startds share one host (same ``Machine``); the cron gives each its own node's name."""
    def published():
        slots = htda_pool.pool.slots()
        return slots if all(slots.get(name, {}).get("HTDA_Up") == "true" for name in htda_pool.workers) else None

    slots = wait_until(published, timeout=30, interval=1, what="HTDA_Up = true in both machine ads")
    for name in htda_pool.workers:
        assert slots[name]["HTDA_NodeName"] == f'"{name}"'
    assert slots["w1"]["Machine"] == slots["w2"]["Machine"]

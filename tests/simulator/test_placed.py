"""HTDA with the coordinator's placement, in work cycles, over several nodes."""

from __future__ import annotations

import pytest

from htda.coordinator.adaptive import PLAIN, PROBATION, AdaptiveLRFUPolicy
from htda.coordinator.rating import LRFUPolicy
from htda.simulator.generator import AnalysisWorkload
from htda.simulator.placed import PlacedHTDAPolicy
from htda.simulator.trace import Chunk


def replay(policy, rows):
    times, ids, sizes, groups = (list(column) for column in zip(*rows))
    return policy.replay(times, ids, sizes, groups)


def test_a_cycle_stages_the_whole_group_before_it_is_read():
    policy = PlacedHTDAPolicy(100, LRFUPolicy(half_life=600.0), nodes=1, cycle=10.0)
    # file 0 of group 7 is read at t=0 (a miss: nothing is placed before the first cycle); file 1 of the
    # group is known from t=1.  The cycle at t>=10 places the group; then both reads hit, file 2 (group 8,
    # too large to share the node with group 7) does not.
    assert replay(policy, [(0.0, 0, 10, 7), (1.0, 1, 20, 7), (2.0, 2, 90, 8)]) == (0, 0)
    assert replay(policy, [(11.0, 1, 20, 7), (12.0, 0, 10, 7), (13.0, 2, 90, 8)]) == (2, 30)
    assert policy.staged == 30 and policy.used == 30 and policy.cycles == 1


def test_nodes_keep_their_capacity_and_churn_adds_up():
    workload = AnalysisWorkload(requests=15_000, seed=9)
    capacity = int(0.3 * workload.working_set_bytes())
    policy = PlacedHTDAPolicy(capacity, LRFUPolicy(half_life=300.0), nodes=3, cycle=300.0)
    hits = 0
    for chunk in workload.chunks():
        chunk: Chunk
        hits += policy.replay(chunk.times.tolist(), chunk.ids.tolist(), chunk.sizes.tolist(), chunk.groups.tolist())[0]
        assert all(used <= capacity // 3 for used in policy.bytes_per_node().values())
    assert policy.cycles > 10 and hits > 0
    assert policy.staged - policy.evicted == policy.used


def hot_group_among_a_scan(steps: int = 400):
    """Group 1 (one file of 100 bytes) read every fifth step, a new group of one such file read once at every
    other step."""
    return [(float(t), 0, 100, 1) if t % 5 == 0 else (float(t), 1000 + t, 100, 1000 + t) for t in range(steps)]


def frozen_adaptive() -> AdaptiveLRFUPolicy:
    """An adaptive rating at a short half-life (the newest groups rank first) that never switches by itself."""
    return AdaptiveLRFUPolicy(half_life=1.0, half_lives=(1.0,), hysteresis=1e9, decisive=1e9)


@pytest.mark.parametrize("layout", [PLAIN, PROBATION])
def test_an_adaptive_rating_is_driven_as_the_coordinator_drives_it(layout):
    rating = frozen_adaptive()
    policy = PlacedHTDAPolicy(250, rating, nodes=1, cycle=3.0)  # room for two files
    rows = hot_group_among_a_scan()
    replay(policy, rows[:10])
    assert rating.capacity == 2  # its shadows hold as many groups as the placement does
    rating.layout = layout
    hits, _ = replay(policy, rows[10:])
    hot_reads = sum(1 for row in rows[10:] if row[3] == 1)
    if layout == PROBATION:
        # the groups of the scan, read once, never displace the hot group (read again): it is hit at every read
        # after the first cycles
        assert hits >= hot_reads - 2
    else:
        # the two newest groups are placed: mostly the scan's, the hot group only now and then
        assert hits < hot_reads / 2

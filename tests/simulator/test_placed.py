"""HTDA with the coordinator's placement, in work cycles, over several nodes."""

from __future__ import annotations

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

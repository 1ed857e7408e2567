"""Replicas: copies in proportion to popularity, only in spare room, whole groups, stable from cycle to cycle."""

from __future__ import annotations

import pytest

from htda.coordinator.placement import GroupCandidate, place
from htda.coordinator.replicas import copies_wanted, replicate


def _size(lfn: str) -> int:
    return 100


def _group(name: str, score: float, files: int = 3) -> GroupCandidate[str]:
    return GroupCandidate(name, score, tuple(f"/{name}/f{i}" for i in range(files)))


def _copies(replicas: dict[str, tuple[str, ...]], group: GroupCandidate[str]) -> set[str]:
    """The nodes holding a replica of every file of ``group``."""
    sets = [set(replicas.get(lfn, ())) for lfn in group.files]
    return set.intersection(*sets)


@pytest.mark.parametrize(("score", "total", "nodes", "max_copies", "expected"), [
    (48, 100, 4, 3, 2),   # 1.92 nodes' worth of jobs: two copies
    (60, 100, 4, 3, 3),   # 2.4: three
    (90, 100, 8, 3, 3),   # capped by max_copies
    (90, 100, 2, 5, 2),   # and by the pool's size
    (25, 100, 4, 3, 1),   # exactly one node's worth: one copy
    (5, 100, 4, 3, 1),
    (0, 100, 4, 3, 1),
    (10, 0, 4, 3, 1),
])
def test_copies_follow_the_share_of_the_pool(score, total, nodes, max_copies, expected):
    assert copies_wanted(score, total, nodes, max_copies) == expected


def test_a_group_twice_as_popular_gets_more_copies_on_other_nodes():
    hot, warm, cold = _group("hot", 8.0), _group("warm", 4.0), _group("cold", 1.0)
    groups = [hot, warm, cold]
    capacities = {f"n{i}": 1000 for i in range(4)}
    placement = place(groups, {lfn: 100 for g in groups for lfn in g.files}, capacities, {})
    replicas = replicate(groups, placement, _size, capacities, max_copies=3)
    # shares of 13: hot 2.5 nodes' worth -> 3 copies, warm 1.2 -> 2, cold 0.3 -> 1
    hot_copies, warm_copies = _copies(replicas, hot), _copies(replicas, warm)
    assert len(hot_copies) == 2 and len(warm_copies) == 1
    assert not any(lfn in replicas for lfn in cold.files)
    assert placement[hot.files[0]] not in hot_copies and placement[warm.files[0]] not in warm_copies
    for lfn, nodes in replicas.items():
        assert len(set(nodes)) == len(nodes) and placement[lfn] not in nodes


def test_evenly_popular_groups_get_no_replica():
    groups = [_group(f"g{i}", 1.0) for i in range(8)]
    capacities = {f"n{i}": 10_000 for i in range(4)}
    placement = place(groups, {lfn: 100 for g in groups for lfn in g.files}, capacities, {})
    assert replicate(groups, placement, _size, capacities, max_copies=3) == {}


def test_replicas_use_only_the_room_first_copies_leave():
    hot, other = _group("hot", 10.0), _group("other", 1.0)
    capacities = {"a": 300, "b": 300, "c": 600}
    placement = {**dict.fromkeys(hot.files, "a"), **dict.fromkeys(other.files, "b")}
    replicas = replicate([hot, other], placement, _size, capacities, max_copies=3)
    assert _copies(replicas, hot) == {"c"}  # a and b are full of first copies; c has room for one copy
    used = {"a": 300, "b": 300, "c": 0}
    for nodes in replicas.values():
        for node in nodes:
            used[node] += 100
    assert all(used[n] <= capacities[n] for n in capacities)


def test_when_room_is_short_the_next_copy_goes_to_the_best_score_per_copy():
    hot, warm = _group("hot", 10.0), _group("warm", 6.0)
    capacities = {"a": 300, "b": 300, "c": 300, "d": 300}
    placement = {**dict.fromkeys(hot.files, "a"), **dict.fromkeys(warm.files, "b")}
    replicas = replicate([hot, warm], placement, _size, capacities, max_copies=3)
    # room for two whole copies (c, d): hot's second (10/1) then warm's second (6/1) beats hot's third (10/2)
    assert len(_copies(replicas, hot)) == 1 and len(_copies(replicas, warm)) == 1


def test_last_cycles_replica_nodes_are_kept():
    hot = _group("hot", 10.0)
    capacities = {"a": 1000, "b": 1000, "c": 1000, "d": 1000}
    placement = dict.fromkeys(hot.files, "a")
    first = replicate([hot], placement, _size, capacities, max_copies=2)
    (node,) = _copies(first, hot)
    roomier = {**capacities, next(n for n in "bcd" if n != node): 5000}  # another node now has more room
    again = replicate([hot], placement, _size, roomier, max_copies=2, current=first)
    assert again == first


def test_a_split_group_or_a_released_file_is_not_replicated_there():
    hot, warm = _group("hot", 10.0), _group("warm", 1.0)
    capacities = {"a": 1000, "b": 1000, "c": 1000}
    split = {hot.files[0]: "a", hot.files[1]: "b", hot.files[2]: "b", **dict.fromkeys(warm.files, "c")}
    assert not any(lfn in replicate([hot, warm], split, _size, capacities, max_copies=3) for lfn in hot.files)
    whole = {**dict.fromkeys(hot.files, "a"), **dict.fromkeys(warm.files, "c")}
    released = {hot.files[1]: {"b"}}
    replicas = replicate([hot, warm], whole, _size, capacities, max_copies=3, excluded=released)
    assert _copies(replicas, hot) == {"c"}


def test_a_file_of_two_hot_groups_is_copied_once_per_node():
    shared = "/shared/f"
    one = GroupCandidate("one", 10.0, ("/one/f", shared))
    two = GroupCandidate("two", 10.0, ("/two/f", shared))
    capacities = {"a": 1000, "b": 1000, "c": 1000}
    placement = {"/one/f": "a", "/two/f": "a", shared: "a"}
    replicas = replicate([one, two], placement, _size, capacities, max_copies=2)
    assert _copies(replicas, one) and _copies(replicas, two)
    assert len(replicas[shared]) == len(set(replicas[shared]))


def test_max_copies_one_or_a_single_node_means_no_replicas():
    hot = _group("hot", 10.0)
    placement = dict.fromkeys(hot.files, "a")
    assert replicate([hot], placement, _size, {"a": 1000, "b": 1000}, max_copies=1) == {}
    assert replicate([hot], placement, _size, {"a": 1000}, max_copies=3) == {}


def test_headroom_provisions_for_bursts():
    assert copies_wanted(25, 100, 4, 3) == 1  # one node's worth on average
    assert copies_wanted(25, 100, 4, 3, headroom=2.0) == 2  # a burst of its jobs wants two
    assert copies_wanted(5, 100, 4, 3, headroom=2.0) == 1


def test_a_replica_goes_to_the_node_with_the_least_hot_demand_not_the_roomiest():
    hot, warm, other = _group("hot", 6.0), _group("warm", 3.0), _group("other", 1.0)
    capacities = {"a": 1000, "b": 1000, "c": 5000}
    # c is the roomiest but already holds the warm group; b holds only a cold one
    placement = {**dict.fromkeys(hot.files, "a"), **dict.fromkeys(warm.files, "c"), **dict.fromkeys(other.files, "b")}
    replicas = replicate([hot, warm, other], placement, _size, capacities, max_copies=2)
    assert _copies(replicas, hot) == {"b"}


def test_a_replica_stays_when_its_share_dips_while_its_node_has_room():
    """Hysteresis: a copy leaves for room, not because the group's share no longer asks for it."""
    hot, other = _group("hot", 8.0), _group("other", 1.0)
    capacities = {f"n{i}": 1000 for i in range(4)}
    sizes = {lfn: 100 for g in (hot, other) for lfn in g.files}
    placement = place([hot, other], sizes, capacities, {})
    first = replicate([hot, other], placement, _size, capacities, max_copies=3)
    made = _copies(first, hot)
    assert made
    # new data arrives: hot's share now asks for one copy only
    newcomers = [_group(f"new{i}", 8.0) for i in range(4)]
    groups = [hot, other, *newcomers]
    sizes.update({lfn: 100 for g in newcomers for lfn in g.files})
    placement = place(groups, sizes, capacities, placement)
    assert copies_wanted(hot.score, sum(g.score for g in groups), 4, 3, 1.0) == 1
    kept = replicate(groups, placement, _size, capacities, max_copies=3, current=first)
    assert made <= _copies(kept, hot)
    # without last cycle's replicas it would have made none: the kept ones are the hysteresis
    assert not _copies(replicate(groups, placement, _size, capacities, max_copies=3), hot)
    # a group no longer hot loses its copies; a node with no room left for them drops them
    assert not _copies(replicate(groups[1:], placement, _size, capacities, max_copies=3, current=first), hot)
    room = {node: 0 for node in capacities}
    assert not _copies(replicate(groups, placement, _size, capacities, max_copies=3, current=first, room=room), hot)
    # a node that released a file of the group is not kept either
    released = {lfn: list(made) for lfn in hot.files}
    assert not (made & _copies(replicate(groups, placement, _size, capacities, max_copies=3, current=first,
                                         excluded=released), hot))

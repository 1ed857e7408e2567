"""Placement: groups together, capacities, departed nodes, releases, hysteresis and stability."""

from __future__ import annotations

import random

from htda.coordinator.placement import GroupCandidate, Placer, file_scores, moves, place


def _groups(n_groups: int, seed: int = 1, files_per_group: int = 4) -> tuple[list[GroupCandidate], dict[str, int]]:
    rng = random.Random(seed)
    groups, sizes = [], {}
    for g in range(n_groups):
        files = tuple(f"/store/g{g}/f{i}.root" for i in range(rng.randint(1, files_per_group)))
        for lfn in files:
            sizes[lfn] = rng.randint(1, 10) * 100
        groups.append(GroupCandidate(f"g{g}", rng.uniform(0.1, 100.0), files))
    return groups, sizes


def _used(placement, sizes):
    used: dict[str, int] = {}
    for lfn, node in placement.items():
        used[node] = used.get(node, 0) + sizes[lfn]
    return used


def test_groups_stay_together_when_they_fit():
    groups, sizes = _groups(40)
    capacities = {"n1": 30_000, "n2": 30_000, "n3": 30_000}  # room for all, but no node holds everything
    assert sum(sizes.values()) > 30_000
    placement = place(groups, sizes, capacities, {})
    assert set(placement) == set(sizes)
    for group in groups:
        assert len({placement[lfn] for lfn in group.files}) == 1, group
    assert len(set(placement.values())) == 3  # popular groups are spread over the pool


def test_capacity_is_respected_on_every_node():
    groups, sizes = _groups(200, seed=2)
    capacities = {"n1": 5000, "n2": 3000, "n3": 700}
    placement = place(groups, sizes, capacities, {})
    for node, used in _used(placement, sizes).items():
        assert used <= capacities[node]
    # and the space is used: what is left out does not fit in what is left free
    free = {n: capacities[n] - _used(placement, sizes).get(n, 0) for n in capacities}
    for lfn in sizes:
        if lfn not in placement:
            assert all(sizes[lfn] > f for f in free.values())


def test_best_groups_are_placed_first():
    groups = [GroupCandidate("low", 1.0, ("/l",)), GroupCandidate("high", 9.0, ("/h",))]
    placement = place(groups, {"/l": 10, "/h": 10}, {"n": 10}, {})
    assert placement == {"/h": "n"}


def test_a_group_too_big_for_one_node_is_split_over_few_nodes():
    group = GroupCandidate("big", 5.0, ("/a", "/b", "/c"))
    placement = place([group], {"/a": 6, "/b": 6, "/c": 6}, {"n1": 12, "n2": 12, "n3": 12}, {})
    assert set(placement) == {"/a", "/b", "/c"}
    assert len(set(placement.values())) == 2


def test_departed_node_files_are_replaced_and_the_others_stay():
    groups, sizes = _groups(30, seed=3)
    capacities = {"n1": 4000, "n2": 4000, "n3": 4000}
    before = place(groups, sizes, capacities, {})
    on_n2 = {lfn for lfn, node in before.items() if node == "n2"}
    assert on_n2
    after = place(groups, sizes, {"n1": 4000, "n3": 4000, "n4": 4000}, before)
    assert "n2" not in after.values()
    for lfn, node in before.items():
        if node != "n2":
            assert after[lfn] == node  # nothing else moved
    assert on_n2 <= set(after)  # the new node took them


def test_released_file_goes_elsewhere():
    groups = [GroupCandidate("g", 5.0, ("/a",))]
    first = place(groups, {"/a": 10}, {"n1": 100, "n2": 50}, {})
    assert first == {"/a": "n1"}
    second = place(groups, {"/a": 10}, {"n1": 100, "n2": 50}, first, excluded={"/a": {"n1"}})
    assert second == {"/a": "n2"}
    assert moves(first, second) == {"/a": ("n1", "n2")}


def test_unchanged_history_moves_nothing_over_many_cycles():
    groups, sizes = _groups(300, seed=4)
    capacities = {"n1": 7000, "n2": 5000, "n3": 3000}
    placement = place(groups, sizes, capacities, {})
    for _ in range(5):
        again = place(groups, sizes, capacities, placement)
        assert moves(placement, again) == {}
        placement = again


def test_unchanged_history_moves_nothing_from_any_start():
    # start from a random (worse) placement: the second cycle already is a fixed point
    groups, sizes = _groups(200, seed=5)
    capacities = {"n1": 6000, "n2": 6000}
    rng = random.Random(0)
    start = {lfn: rng.choice(["n1", "n2", "gone"]) for lfn in rng.sample(sorted(sizes), 60)}
    first = place(groups, sizes, capacities, start)
    assert moves(first, place(groups, sizes, capacities, first)) == {}


def test_hysteresis_keeps_a_slightly_worse_file_and_yields_to_a_clearly_better_one():
    sizes = {"/old": 10, "/new": 10}
    old_only = [GroupCandidate("old", 1.0, ("/old",))]
    current = place(old_only, sizes, {"n": 10}, {})
    assert current == {"/old": "n"}
    slightly = [GroupCandidate("old", 1.0, ("/old",)), GroupCandidate("new", 1.5, ("/new",))]
    assert place(slightly, sizes, {"n": 10}, current, hysteresis=2.0) == {"/old": "n"}
    clearly = [GroupCandidate("old", 1.0, ("/old",)), GroupCandidate("new", 2.5, ("/new",))]
    assert place(clearly, sizes, {"n": 10}, current, hysteresis=2.0) == {"/new": "n"}
    # without hysteresis the slightly better file wins at once
    assert place(slightly, sizes, {"n": 10}, current, hysteresis=1.0) == {"/new": "n"}


def test_shrunken_node_sheds_its_worst_files():
    groups = [GroupCandidate("a", 3.0, ("/a",)), GroupCandidate("b", 2.0, ("/b",)), GroupCandidate("c", 1.0, ("/c",))]
    sizes = {"/a": 10, "/b": 10, "/c": 10}
    current = place(groups, sizes, {"n": 30}, {})
    assert len(current) == 3
    assert place(groups, sizes, {"n": 20}, current) == {"/a": "n", "/b": "n"}


def test_file_scores_follow_the_group_max_rule():
    groups = [GroupCandidate("job", 1.0, ("/a", "/b")), GroupCandidate("task", 4.0, ("/b", "/c"))]
    assert file_scores(groups) == {"/a": 1.0, "/b": 4.0, "/c": 4.0}


def test_unknown_sizes_count_as_the_default():
    placement = place([GroupCandidate("g", 1.0, ("/a", "/b"))], {"/a": None}, {"n": 25}, {}, unknown_size=10)
    assert placement == {"/a": "n", "/b": "n"}


def test_placing_only_the_changed_groups():
    groups, sizes = _groups(200, seed=6)
    capacities = {"n1": 6000, "n2": 6000}
    current = place(groups, sizes, capacities, {})
    scores = file_scores(groups)
    current_scores = {lfn: scores[lfn] for lfn in current}
    assert place([], sizes, capacities, current, current_scores=current_scores) == current
    outside = [g for g in groups if not any(lfn in current for lfn in g.files)][:3]
    assert len(outside) == 3
    hot = [GroupCandidate(g.group, 1000.0, g.files) for g in outside]  # far above every placed file
    after = place(hot, sizes, capacities, current, current_scores=current_scores)
    for group in hot:
        assert all(lfn in after for lfn in group.files)
        assert len({after[lfn] for lfn in group.files}) == 1
    for node, used in _used(after, sizes).items():
        assert used <= capacities[node]
    moved = moves(current, after)
    gone = [lfn for lfn, (before, now) in moved.items() if before is not None and now is None]
    assert gone and all(scores[lfn] * 2.0 < 1000.0 for lfn in gone)
    assert all(before is None or now is None for before, now in moved.values())  # nothing shuffled between nodes
    # a full placement with the same scores agrees on the hot groups
    full = place([g for g in groups if g.group not in {h.group for h in hot}] + hot, sizes, capacities, current)
    assert {lfn for g in hot for lfn in g.files} <= set(full)


def _raised(groups: list[GroupCandidate], rng: random.Random, count: int) -> list[GroupCandidate]:
    """``count`` of ``groups`` with their scores raised (keys only grow), and a new group now and then."""
    out = [GroupCandidate(g.group, g.score * rng.uniform(1.0, 30.0), g.files) for g in rng.sample(groups, count)]
    if rng.random() < 0.5:
        n = len(groups) + rng.randrange(10_000)
        out.append(GroupCandidate(f"new{n}", rng.uniform(0.1, 500.0), tuple(f"/new/{n}/{i}" for i in range(3))))
    return out


def test_a_kept_placement_updated_with_the_changed_groups_is_the_placement_computed_afresh():
    """What the coordinator's incremental cycle relies on: Placer.update gives what place() with every placed
    file's score gives, while doing only the changed groups' work."""
    for seed in range(40):
        rng = random.Random(seed)
        groups, sizes = _groups(120, seed=seed)
        capacities = {f"n{i}": rng.randrange(2000, 9000) for i in range(rng.randint(1, 4))}
        placer: Placer[str] = Placer()
        current = dict(placer.place(groups, sizes, capacities, {}))
        assert current == place(groups, sizes, capacities, {})
        scores = file_scores(groups)
        for _ in range(5):
            changed = _raised(groups, rng, rng.randint(1, 6))
            for g in changed:
                sizes.update({lfn: rng.randint(1, 10) * 100 for lfn in g.files if lfn not in sizes})
            rescored = {lfn: max(scores.get(lfn, 0.0), g.score) for g in changed for lfn in g.files}
            placed_scores = {lfn: rescored.get(lfn, scores.get(lfn, 0.0)) for lfn in current}
            afresh = place(changed, sizes, capacities, current, current_scores=placed_scores)
            moved = placer.update(changed, rescored, sizes)
            assert dict(placer.where) == afresh, seed
            assert moved == moves(current, afresh)
            assert placer.free() == {n: c - _used(afresh, sizes).get(n, 0) for n, c in capacities.items()}
            current = afresh
            scores.update(rescored)


def test_a_slightly_better_changed_group_displaces_nothing():
    groups = [GroupCandidate("a", 1.0, ("/a",)), GroupCandidate("b", 1.5, ("/b",))]
    sizes = {"/a": 10, "/b": 10}
    current = place(groups[:1], sizes, {"n": 10}, {})
    assert place(groups[1:], sizes, {"n": 10}, current, current_scores={"/a": 1.0}) == {"/a": "n"}
    better = [GroupCandidate("b", 2.5, ("/b",))]
    assert place(better, sizes, {"n": 10}, current, current_scores={"/a": 1.0}) == {"/b": "n"}


def test_a_file_not_copied_yet_follows_the_node_whose_job_reads_it():
    sizes = {"/g/a": 100, "/g/b": 100, "/h/c": 100}
    groups = [GroupCandidate("g", 5.0, ("/g/a", "/g/b")), GroupCandidate("h", 4.0, ("/h/c",))]
    current = {"/g/a": "n1", "/g/b": "n1", "/h/c": "n2"}
    readers = {"/g/a": "n2", "/g/b": "n2"}  # a job on n2 reads group g from storage
    placement = place(groups, sizes, {"n1": 1000, "n2": 1000}, current, readers=readers, movable=set(readers))
    assert placement == {"/g/a": "n2", "/g/b": "n2", "/h/c": "n2"}
    # without readers nothing moves, nor does a file whose copy may have started (not deferred)
    assert place(groups, sizes, {"n1": 1000, "n2": 1000}, current) == current
    assert place(groups, sizes, {"n1": 1000, "n2": 1000}, current, readers=readers) == current


def test_a_read_file_never_displaces_a_copy_and_a_dead_or_releasing_reader_is_ignored():
    sizes = {"/g/a": 100, "/h/c": 100}
    groups = [GroupCandidate("g", 5.0, ("/g/a",)), GroupCandidate("h", 1.0, ("/h/c",))]
    current = {"/g/a": "n1", "/h/c": "n2"}
    full = place(groups, sizes, {"n1": 1000, "n2": 150}, current, readers={"/g/a": "n2"}, movable={"/g/a"})
    assert full == current  # n2 has room for its own copy only
    assert place(groups, sizes, {"n1": 1000, "n2": 1000}, current, readers={"/g/a": "gone"},
                 movable={"/g/a"}) == current
    released = place(groups, sizes, {"n1": 1000, "n2": 1000}, current, readers={"/g/a": "n2"},
                     excluded={"/g/a": {"n2"}}, movable={"/g/a"})
    assert released == current


def test_a_new_group_goes_to_its_reader_after_the_nodes_that_hold_it():
    sizes = {"/g/a": 100, "/g/b": 100, "/k/x": 100, "/k/y": 100}
    capacities = {"n1": 1000, "n2": 500, "n3": 1000}  # n1 and n3 are the emptiest
    new = [GroupCandidate("g", 5.0, ("/g/a", "/g/b"))]
    assert set(place(new, sizes, capacities, {}, readers={"/g/b": "n2"}).values()) == {"n2"}
    held = [GroupCandidate("k", 5.0, ("/k/x", "/k/y"))]  # /k/x is on n3 (copied): the group joins it
    placement = place(held, sizes, capacities, {"/k/x": "n3"}, readers={"/k/y": "n2"})
    assert placement == {"/k/x": "n3", "/k/y": "n3"}

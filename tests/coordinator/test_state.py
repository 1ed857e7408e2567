"""The rating state's bulk reads for the work cycle agree with its per-file reads (issue 18)."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from htda.coordinator.rating import GIB, NEVER, LRFUPolicy
from htda.coordinator.state import MAX_RISE, RatingState


def _state(per_size: bool, files: int = 200, seed: int = 3) -> RatingState:
    """Files 1..files in groups of 4 with assorted sizes (0, unknown, absent) and keys (some never accessed)."""
    rng = random.Random(seed)
    state = RatingState(LRFUPolicy(half_life=3600.0), per_size=per_size)
    state.add_files({fid: (f"/f{fid}", rng.choice([0, None, GIB, 3 * GIB, rng.randrange(1, 8 * GIB)]))
                     for fid in range(1, files + 1) if fid % 17})  # every 17th file: size absent
    state.add_members((1 + (fid - 1) // 4, fid) for fid in range(1, files + 1))
    for fid in range(1, files + 1):
        if fid % 5:
            state.file_keys[fid] = rng.choice([1.0, 2.0, rng.uniform(-50, 50)])  # ties among them
    return state


@pytest.mark.parametrize("per_size", [False, True])
def test_bulk_order_keys_are_the_per_file_keys(per_size):
    state = _state(per_size)
    fids = np.array([*range(1, 201), 0, 5000], dtype=np.int64)  # and ids the columns never saw
    bulk = state.file_order_keys(fids)
    one_by_one = [state.file_order_key(int(fid)) for fid in fids]
    assert bulk.tolist() == pytest.approx(one_by_one, rel=1e-15, abs=1e-15)
    assert bulk[-1] == bulk[-2] == NEVER and sum(k == NEVER for k in bulk) == sum(k == NEVER for k in one_by_one)


@pytest.mark.parametrize("per_size", [False, True])
def test_each_node_lists_its_pinned_files_first_then_the_best(per_size):
    state = _state(per_size)
    state.pinned = {7, 90, 133}
    rng = random.Random(1)
    placement = {fid: rng.choice(["b", "a", "c"]) for fid in rng.sample(range(1, 201), 150)}
    expected: dict[str, list[int]] = {}
    for fid, node in placement.items():
        expected.setdefault(node, []).append(fid)
    for fids in expected.values():  # the rule as written before the bulk path, a stable sort
        fids.sort(key=lambda fid: (fid in state.pinned, state.file_order_key(fid)), reverse=True)
    lists = state.lists_by_node(placement)
    assert lists == expected
    assert [lists["a"][0] in state.pinned, lists["a"][-1] in state.pinned] != [False, True]
    assert state.lists_by_node({}) == {}


def test_the_changed_groups_and_their_files_are_scored_on_the_last_full_placements_scale():
    state = _state(per_size=False)
    state.pinned = {9}
    assert state.changed_candidates({3, 4}) is None  # no full placement yet: no scale to score on
    state.policy.set_key(3, 7.0)
    state.reference = top = 5.0  # what the last full placement's best candidate scored 1.0 at
    candidates, scores = state.changed_candidates({3, 4})
    assert {c.group: c.score for c in candidates} == {3: 4.0, 4: 0.0, ("pin", 9): math.inf}
    assert set(scores) == set(range(9, 17))  # the files of groups 3 and 4, placed or not
    for fid, score in scores.items():
        key = state.file_order_key(fid)
        want = math.inf if fid == 9 else 0.0 if key == NEVER else 2.0 ** (key - top)
        assert score == pytest.approx(want, rel=1e-14), fid
    state.policy.set_key(4, top + MAX_RISE + 1)  # past that, scores on the old scale could overflow
    assert state.changed_candidates({3, 4}) is None


def test_the_hot_groups_among_the_last_ones_and_the_rekeyed_are_the_hot_groups():
    """What the incremental cycle relies on: keys only grow, so ranking the last hot groups and the groups
    re-keyed since finds the same best groups as ranking every group."""
    rng = random.Random(11)
    state = RatingState(LRFUPolicy(half_life=600.0))
    state.add_members((gid, fid) for gid in range(1, 2001) for fid in (2 * gid, 2 * gid + 1))
    t = 0.0
    state.add_accesses((rng.randrange(1, 2001), None, t + i) for i in range(3000))
    state.take_changed()
    hot = [c.group for c in state.hot_groups(40)]
    for _ in range(30):
        t += rng.choice([1.0, 600.0, 6000.0])  # later accesses outweigh old ones by more or less
        state.add_accesses((rng.randrange(1, 2001) if rng.random() < 0.5 else rng.randrange(1, 50), None, t)
                           for _ in range(rng.randrange(1, 60)))
        rekeyed = state.take_changed()
        everything = state.hot_groups(40)
        narrowed = state.hot_groups(40, among=rekeyed.union(hot))
        # the same scores; the same groups but for ties with the last one, which either ranking may take
        assert [c.score for c in narrowed] == [c.score for c in everything]
        last = everything[-1].score
        assert {c.group for c in narrowed if c.score > last} == {c.group for c in everything if c.score > last}
        assert {c.group for c in narrowed} - {c.group for c in everything} <= \
            {g for g in range(1, 2001) if state.policy.key(g) == state.policy.key(everything[-1].group)}
        hot = [c.group for c in narrowed]

"""The admission filter: the frequency sketch (estimates, doorkeeper, halving), the window's hill climbing,
and a group read once that cannot displace a frequently read one in the coordinator's placement."""

from __future__ import annotations

import pytest

from htda.coordinator.adaptive import ASKING, LIRS, PLAIN, PROBATION, AdaptiveLRFUPolicy
from htda.coordinator.admission import FrequencySketch, TinyLFUAdmission, WindowClimber, make_admission
from htda.coordinator.core import CacheNode, Coordinator
from htda.coordinator.placement import GroupCandidate, place
from htda.coordinator.rating import LRFUPolicy
from htda.coordinator.store import JobRecord, Store


def test_sketch_estimates_counts_without_undercounting():
    sketch = FrequencySketch(width=1024)
    for key in range(200):
        for _ in range(key % 7):
            sketch.increment(key)
    for key in range(200):
        assert sketch.estimate(key) >= key % 7  # a count-min sketch never undercounts (before halving)
    exact = sum(sketch.estimate(key) == key % 7 for key in range(200))
    assert exact >= 190  # and with a width five times the keys, collisions are rare
    assert sketch.estimate(10**6) == 0  # (an int: its hash, so the test, does not depend on PYTHONHASHSEED)


def test_doorkeeper_takes_the_first_access_and_counters_the_rest():
    sketch = FrequencySketch(width=256)
    for key in range(100):
        sketch.increment(key)  # one-hit wonders: none of them reaches the counters
    assert sketch.counted() == 0
    assert all(sketch.estimate(key) == 1 for key in range(100))
    sketch.increment(7)
    assert sketch.estimate(7) == 2 and sketch.counted() == sketch.depth  # one counter in each row


def test_counters_saturate_at_fifteen():
    sketch = FrequencySketch(width=64, sample_factor=100)
    for _ in range(40):
        sketch.increment("hot")
    assert sketch.estimate("hot") == 16  # 15 in the counters + the doorkeeper


def test_halving_after_a_sample_of_accesses_ages_everything():
    sketch = FrequencySketch(width=64, sample_factor=1)  # a halving every 64 accesses
    assert sketch.sample_size == 64
    for _ in range(9):
        sketch.increment("old")  # the doorkeeper and 8 in the counters
    for key in range(54):
        sketch.increment(("filler", key))
    assert sketch.samples == 63 and sketch.estimate("old") == 9
    sketch.increment(("filler", 54))  # the 64th access: counters halve, the doorkeeper forgets
    assert sketch.samples == 0
    assert sketch.estimate("old") == 4
    assert sketch.estimate(("filler", 0)) == 0


def test_growing_the_sketch_starts_afresh():
    sketch = FrequencySketch(width=64)
    sketch.increment(1)
    sketch.ensure_width(1000)
    assert sketch.width == 1024 and sketch.estimate(1) == 0
    sketch.ensure_width(10)  # never shrinks
    assert sketch.width == 1024


def test_admission_keeps_the_frequent_victim():
    admission = TinyLFUAdmission(width=256)
    for _ in range(5):
        admission.record("hot")
    admission.record("once")
    assert not admission.admit("once", ["hot"])
    assert admission.admit("hot", ["once"])
    assert not admission.admit("once", ["once-too"]) or admission.frequency("once-too") < 1
    assert admission.admit("once", ["once"])  # its own files are not asked about
    assert make_admission("none") is None and make_admission("tinylfu").name == "tinylfu"


def test_window_climber_follows_the_hit_ratio_and_turns_back():
    climber = WindowClimber(start=0.5, step=0.1, decay=1.0, restart=1.0)
    assert climber.adjust(0.3) == 0.6  # better than nothing so far: keep going up
    assert climber.adjust(0.4) == 0.7  # better again
    assert abs(climber.adjust(0.35) - 0.6) < 1e-9  # worse: turn back
    for _ in range(20):
        climber.adjust(0.0)
    assert 0.0 <= climber.share <= 1.0


def test_a_group_read_once_cannot_displace_a_frequent_one_in_placement():
    admission = TinyLFUAdmission(width=256)
    for _ in range(6):
        admission.record("hot")
    admission.record("scan")
    groups = [GroupCandidate("scan", 10.0, ("s1",)), GroupCandidate("hot", 1.0, ("h1",))]
    sizes = {"s1": 100, "h1": 100}
    current = {"h1": "n1"}
    best_group = {"h1": "hot", "s1": "scan"}

    def admit(group, victims):
        return admission.admit(group, [best_group[f] for f in victims])

    # without admission the newer (better-scored) scan group displaces the hot one
    assert place(groups, sizes, {"n1": 100}, current) == {"s1": "n1"}
    # with it (no window) the hot group stays
    assert place(groups, sizes, {"n1": 100}, current, admit=admit, window=0.0) == {"h1": "n1"}
    # inside the window nothing is asked
    assert place(groups, sizes, {"n1": 100}, current, admit=admit, window=1.0) == {"s1": "n1"}


def _coordinator(database, admission: str) -> Coordinator:
    core = Coordinator(Store(*database, access_on="submit"), LRFUPolicy(half_life=100.0), hysteresis=1.0,
                       admission=admission)
    core.load()
    if core.admission is not None:
        core.admission.window = 0.0  # every group is asked (no window)
    return core


def _hot_then_once(core: Coordinator) -> set[str]:
    """A group read six times, placed; then, much later (so that it rates higher), a group read once."""
    nodes = [CacheNode("n1", "http://n1", 110)]  # room for one file of 100 bytes (the coordinator fills 95 %)
    core.submit_jobs([JobRecord(f"hot{i}", "alice", ["/store/hot"], submit_time=1000.0 + i,
                                sizes={"/store/hot": 100}) for i in range(6)])
    core.run_cycle(nodes, now=1010.0, full=True)
    assert {core.state.lfns[f] for f in core.placement} == {"/store/hot"}
    core.submit_jobs([JobRecord("once", "bob", ["/store/once"], submit_time=2000.0, sizes={"/store/once": 100})])
    core.run_cycle(nodes, now=2000.0, full=True)
    return {core.state.lfns[f] for f in core.placement}


@pytest.mark.parametrize("admission, kept", [("none", "/store/once"),  # the rating alone: the newest wins
                                              ("tinylfu", "/store/hot")])
def test_coordinator_keeps_the_frequent_group_against_a_one_off(database, admission, kept):
    assert _hot_then_once(_coordinator(database, admission)) == {kept}


def test_coordinator_climbs_the_window_on_the_hits_of_its_accesses(database):
    core = _coordinator(database, "tinylfu")
    core.admission.window = core.admission.climber.share = 0.5
    sample = core.admission.sample_size  # accesses of one file each: one sample
    core.submit_jobs([JobRecord(f"j{i}", "alice", [f"/store/f{i % 7}"], submit_time=float(i),
                                sizes={f"/store/f{i % 7}": 10}) for i in range(sample - 1)])
    assert core.admission.window == 0.5  # not a full sample yet
    core.submit_jobs([JobRecord("last", "alice", ["/store/f0"], submit_time=float(sample), sizes={"/store/f0": 10})])
    assert core.admission.window != 0.5  # a sample was taken (nothing was placed: hit ratio 0) and the window moved
    assert core.admission.climber.previous == 0.0


@pytest.mark.parametrize("layout, kept", [(PLAIN, "/store/once"), (ASKING, "/store/hot"), (PROBATION, "/store/hot"),
                                          (LIRS, "/store/hot")])
def test_an_adaptive_rating_that_admits_keeps_the_frequent_group_against_a_one_off(database, layout, kept):
    """While its admission shadows win, the adaptive rating's own question (the group's key before its latest
    access against the placed groups' keys) keeps a group read once from displacing one read six times; so does
    probation while its probation shadows win (past the best tenth of the space, a group read once stays out), and
    LIRS while its LIRS shadows do (past the best hundredth, a group read once has no key before to beat the
    lowest placed)."""
    rating = AdaptiveLRFUPolicy(half_life=100.0, half_lives=(100.0,))
    core = Coordinator(Store(*database, access_on="submit"), rating, hysteresis=1.0, admission="none")
    core.load()
    rating.layout = layout  # as when a shadow of that layout has won
    assert _hot_then_once(core) == {kept}


def _hot_then_read_twice(database, layout: int, first_read: float) -> set[str]:
    """A group read six times at 1000-1005, placed; then a group read at ``first_read`` and again at 2000."""
    rating = AdaptiveLRFUPolicy(half_life=100.0, half_lives=(100.0,))
    core = Coordinator(Store(*database, access_on="submit"), rating, hysteresis=1.0, admission="none")
    core.load()
    rating.layout = layout
    nodes = [CacheNode("n1", "http://n1", 110)]
    core.submit_jobs([JobRecord(f"hot{i}", "alice", ["/store/hot"], submit_time=1000.0 + i,
                                sizes={"/store/hot": 100}) for i in range(6)])
    core.run_cycle(nodes, now=1010.0, full=True)
    core.submit_jobs([JobRecord(f"twice{i}", "bob", ["/store/twice"], submit_time=t, sizes={"/store/twice": 100})
                      for i, t in enumerate((first_read, 2000.0))])
    core.run_cycle(nodes, now=2000.0, full=True)
    return {core.state.lfns[f] for f in core.placement}


@pytest.mark.parametrize("layout", [PROBATION, LIRS])
def test_on_probation_or_as_lirs_a_group_read_again_soon_displaces_the_placed_one(database, layout):
    assert _hot_then_read_twice(database, layout, 1990.0) == {"/store/twice"}


@pytest.mark.parametrize("layout, kept", [(PROBATION, "/store/twice"), (LIRS, "/store/hot")])
def test_as_lirs_a_group_read_again_displaces_only_groups_rated_below_its_rating_before(database, layout, kept):
    """Read at 500 and at 2000, a group has a key before its latest read (probation lets it in) that is below
    the key of the group read six times at 1000-1005: as LIRS it was not still in the stack, and stays out."""
    assert _hot_then_read_twice(database, layout, 500.0) == {kept}

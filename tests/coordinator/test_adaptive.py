"""lrfu-adaptive (issue 16): shadow caches pick the half-life a workload favours, damped, with validated config."""

from __future__ import annotations

import gc
import heapq
import math
import random
import sys
import weakref
from collections import OrderedDict
from collections.abc import Collection
from typing import Any

import pytest

from htda.coordinator.adaptive import (
    ASKING,
    LASTING_ROUNDS,
    LAYOUTS,
    LIRS,
    LIRS_SHARE,
    PLAIN,
    PROBATION,
    PROBATION_SHARE,
    SHORTEST_ROUND,
    SMALLER_SHARE,
    AdaptiveLRFUPolicy,
    DampedChoice,
    TwoPaceChoice,
    round_length,
    sample_salt,
)
from htda.coordinator.component import CoordinatorComponent
from htda.coordinator.rating import NEVER, LRFUPolicy, RatingPolicy, log_add
from htda.node.config import ConfigError, validate
from htda.simulator.htda_policy import HTDAPolicy

SHORT, MIDDLE, LONG = 10.0, 1000.0, 100_000.0


def adaptive(start: float, capacity: int = 50, **options) -> AdaptiveLRFUPolicy:
    """A policy over three candidates, sampling every group, deciding every 200 accesses (time is injected: the
    accesses' own timestamps)."""
    options = {"half_lives": (SHORT, MIDDLE, LONG), "decision_every": 200, **options}
    return AdaptiveLRFUPolicy(half_life=start, capacity=capacity, **options)


def drifting(phases: int = 12, groups: int = 50, rounds: int = 20):
    """Recency-heavy: each phase reads a new working set of ``groups`` groups, round after round; the groups of
    past phases, read often, are never read again."""
    t = 0
    for phase in range(phases):
        for _ in range(rounds):
            for g in range(groups):
                t += 1
                yield t, phase * groups + g


def hot_among_scans(n: int = 12_000, hot: int = 20, seed: int = 1):
    """Frequency-heavy: half the accesses go to ``hot`` groups, the other half to groups read once (a scan)."""
    rng = random.Random(seed)
    fresh = 1000
    for t in range(1, n + 1):
        if rng.random() < 0.5:
            yield t, rng.randrange(hot)
        else:
            fresh += 1
            yield t, fresh


def test_a_drifting_working_set_picks_the_short_half_life():
    policy = adaptive(start=LONG)
    for t, g in drifting():
        policy.access(g, t)
    assert policy.half_life == SHORT
    assert policy.switches == 1  # straight there, no back and forth


def test_hot_groups_among_scans_pick_the_long_half_life():
    # asking, or on probation, the short one does as well: this is about the half-life alone
    policy = adaptive(start=SHORT, capacity=25, start_admitting=False, choose_probation=False)
    for t, g in hot_among_scans():
        policy.access(g, t)
    assert policy.half_life >= MIDDLE  # both are long against the hot groups' reuse interval (~40 s)
    assert policy.switches == 1
    short, *longer = policy.scores()
    assert max(longer) > 1.5 * short


def test_the_active_keys_are_lrfu_keys_at_the_active_half_life():
    policy = adaptive(start=LONG)
    plain = LRFUPolicy(half_life=SHORT)
    for t, g in drifting(phases=4):
        policy.access(g, t)
        plain.access(g, t)
    assert policy.half_life == SHORT
    assert policy.keys() == pytest.approx(plain.keys())
    assert policy.offset(5000.0) == plain.offset(5000.0)
    assert policy.take_touched() >= set(plain.keys())  # a switch touches every group: they are all re-rated


def test_a_switch_touches_every_group_until_the_touched_are_taken_or_cleared():
    policy = adaptive(start=LONG)
    for t, g in drifting(phases=4):
        policy.access(g, t)
    assert policy.switches and policy.take_touched() == set(policy.keys()) and policy.take_touched() == set()
    policy.forget(next(iter(policy.keys())))
    policy._switch(1 - policy.active, policy.layout)  # every group re-rated: touched, the forgotten one not
    assert policy.take_touched() == set(policy.keys())
    policy.access("new", 9e9)
    policy._switch(1 - policy.active, policy.layout)
    policy.clear_touched()  # (the simulator's: it has no use for them)
    assert policy.take_touched() == set()
    policy.access("new", 9e9 + 1)
    assert policy.take_touched() == {"new"}


def test_a_half_life_switch_sets_the_keys_even_if_keys_were_changed_from_python():
    policy = adaptive(start=LONG)
    for t, g in drifting(phases=2):
        policy.access(g, t)
    held = dict(policy.keys())
    reader = policy.keys()[next(iter(held))]  # a reader holding a key: its float is never changed
    policy._activate(1 - policy.active)
    assert policy.keys() == {g: policy.table(policy.active)[g] for g in held} != held
    assert reader == held[next(iter(held))]
    del policy._keys[next(iter(held))]  # the table no longer has the groups the kernel wrote: each is looked up
    policy._activate(1 - policy.active)
    assert list(policy.keys()) == list(held)[1:]
    policy._keys["stranger"] = 1.0
    with pytest.raises(RuntimeError, match="a key the adaptive rating does not know"):
        policy._activate(1 - policy.active)


def test_a_key_a_reader_holds_does_not_change_under_it():
    # the kernel updates the float of a group's key in place while only it and keys() hold that float
    policy, plain = AdaptiveLRFUPolicy(half_life=3600.0), LRFUPolicy(half_life=3600.0)
    policy.access("g", 0.0)
    plain.access("g", 0.0)
    held = policy.keys()["g"]
    then = float(str(held))  # the value, in an object of its own
    for t in (100.0, 200.0, 7200.0):
        policy.access("g", t)
        plain.access("g", t)
    assert held == then < policy.keys()["g"]  # the reader's float kept its value; keys() has the new key
    assert policy.keys()["g"] == policy.key("g") == pytest.approx(plain.keys()["g"])
    del held
    unheld = id(policy.keys()["g"])
    policy.access("g", 7300.0)
    plain.access("g", 7300.0)
    assert id(policy.keys()["g"]) == unheld  # held by no one else: the same float, updated
    assert policy.keys()["g"] == pytest.approx(plain.keys()["g"])


def test_without_the_mirrored_keys_it_reads_and_decides_as_with_them():
    # the simulator's compiled cache reads the keys from the kernel and turns the dict off: every reading of the
    # policy must stay what it was, through switches of half-life, and turning it on again fills the dict
    mirrored, bare = adaptive(start=LONG), adaptive(start=LONG)
    bare.mirror_keys = False
    for t, g in drifting(phases=4):
        mirrored.access(g, t)
        bare.access(g, t)
    bare.forget(7)
    mirrored.forget(7)
    assert mirrored.half_life != LONG and bare.history == mirrored.history and bare.layout == mirrored.layout
    assert bare._keys == {} and mirrored.mirror_keys and not bare.mirror_keys
    assert bare.keys() == mirrored.keys() and bare.keys() is not bare.keys()  # (a new dict from the table)
    assert [bare.key(g) for g in range(210)] == [mirrored.key(g) for g in range(210)]
    assert bare.key(7) == bare.key("never") == NEVER
    assert len(bare) == len(mirrored) == bare.groups == 199 and 8 in bare and 7 not in bare and "never" not in bare
    assert bare.top(5, now=9e3) == mirrored.top(5, now=9e3)
    assert bare.table(0) == mirrored.table(0) and bare.take_touched() == mirrored.take_touched()
    bare._switch(1 - bare.active, bare.layout)
    mirrored._switch(1 - mirrored.active, mirrored.layout)
    assert bare.take_touched() == set(mirrored.keys()) and bare.keys() == mirrored.keys()
    bare.mirror_keys = True
    assert bare._keys == mirrored._keys and bare.keys() is bare._keys
    bare.access(8, 9e3)
    mirrored.access(8, 9e3)
    assert bare._keys == mirrored._keys


def test_a_key_read_while_the_kernel_updates_is_the_one_keys_holds():
    # another thread may run while the kernel updates (a finalizer it sets off runs Python): its key() reads the
    # dict the coordinator's readers always read, never the half-changed slots, and raises nothing
    policy = AdaptiveLRFUPolicy(half_life=3600.0)
    policy.access(1, 0.0)
    seen = []

    class Reading(int):  # a group whose hash, taken mid-update, reads the policy
        def __hash__(self) -> int:
            seen.append(policy.key(1))
            return int.__hash__(self)

    policy.access(Reading(2), 10.0)
    assert seen and set(seen) == {policy.keys()[1]}


def test_groups_read_once_among_hot_ones_make_it_ask_the_admission_question():
    # one half-life: only admission to choose
    policy = adaptive(start=SHORT, capacity=25, half_lives=(SHORT,), start_admitting=False, choose_probation=False,
                      choose_lirs=False)
    for t, g in hot_among_scans():
        policy.access(g, t)
    assert policy.admitting and policy.switches == 1
    alone, asking = policy.scores()
    assert asking > 1.5 * alone
    assert [(c.half_life, c.layout, c.active) for c in policy.candidates()] == [(SHORT, "plain", False),
                                                                                (SHORT, "asking", True)]


def pairs_among_scans(n: int = 12_000, hot: int = 50, gap: int = 2, seed: int = 1):
    """Hot groups (40 % of the accesses), groups read once (30 %) and groups read twice, ``gap`` accesses apart,
    never again (30 %): what is new is worth a short chance, not a place among the hot groups."""
    rng = random.Random(seed)
    fresh, again = 1000, []
    for t in range(1, n + 1):
        if again and again[0][0] <= t:
            yield t, again.pop(0)[1]
            continue
        draw = rng.random()
        if draw < 0.4:
            yield t, rng.randrange(hot)
            continue
        fresh += 1
        if draw >= 0.7:
            again.append((t + gap, fresh))
        yield t, fresh


def test_groups_read_again_at_once_among_scans_put_new_groups_on_probation():
    policy = adaptive(start=SHORT, capacity=60)
    for t, g in pairs_among_scans():
        policy.access(g, t)
    assert policy.probation and not policy.admitting and policy.half_life >= MIDDLE
    best = {layout: max(c.total for c in policy.candidates() if c.layout == layout)
            for layout in ("plain", "asking", "probation")}
    # the queue keeps the hot groups from the groups read once, and still hits the second read of a pair
    assert best["probation"] > 1.3 * max(best["plain"], best["asking"])
    assert policy.history[-1][2] == "probation"
    # and the slow totals agree: the cache may queue what an earlier layout admitted read once (_replay.c)
    assert policy.settled


@pytest.mark.parametrize("choose_lirs, question", [(True, LIRS), (False, ASKING)])
def test_a_working_set_that_moves_on_admits_every_group(choose_lirs, question):
    """It starts with its question (LIRS's test, or the admission question without LIRS shadows); where new groups
    are read again and again at once the question only delays them, and it stops asking, once."""
    policy = adaptive(start=SHORT, half_lives=(SHORT,), choose_lirs=choose_lirs)
    assert policy.layout == question and policy.admitting == (question == ASKING)
    for t, g in drifting():
        policy.access(g, t)
    assert policy.layout == PLAIN and policy.switches == 1  # it stopped, once
    policy = adaptive(start=SHORT, half_lives=(SHORT,), start_admitting=False, choose_lirs=choose_lirs)
    for t, g in drifting():
        policy.access(g, t)
    assert policy.layout == PLAIN and all(layout == "plain" for _, _, layout in policy.history)  # it never asked


@pytest.mark.parametrize("choose_lirs, question", [(True, LIRS), (False, ASKING)])
def test_it_asks_only_while_it_has_shadows(choose_lirs, question):
    policy = adaptive(start=SHORT, capacity=0, half_lives=(SHORT,), choose_lirs=choose_lirs)
    assert policy.layout == PLAIN  # no capacity, no shadows: plain LRFU
    policy.set_capacity(40)
    assert policy.layout == question  # the shadows start: it asks first
    policy.set_capacity(0)
    assert policy.layout == PLAIN
    policy.set_capacity(50)
    assert policy.layout == question
    for t, g in drifting():  # asking loses: it stops ...
        policy.access(g, t)
    assert policy.layout == PLAIN
    policy.set_capacity(60)  # ... and a new size of a running cache does not make it start again
    assert policy.layout == PLAIN


def test_without_admission_shadows_it_never_asks():
    policy = adaptive(start=SHORT, choose_admission=False)
    assert not policy.admitting
    for t, g in hot_among_scans(3000):
        policy.access(g, t)
    assert not policy.admitting and policy.layouts == (PLAIN, PROBATION, LIRS)


def test_a_layout_is_one_of_the_four():
    policy = adaptive(start=SHORT)
    policy.layout = PROBATION
    assert policy.probation and not policy.admitting and policy.layout == PROBATION
    for wrong in (4, -1, "asking", None, 2**70):
        with pytest.raises(ValueError, match="layout must be"):
            policy.layout = wrong
    with pytest.raises(ValueError, match="layout must be"):
        del policy.layout
    assert policy.layout == PROBATION  # unchanged


def test_the_key_before_the_latest_access_is_kept_for_the_question():
    policy = adaptive(start=SHORT)
    assert policy.before("new") == float("-inf")
    policy.access("g", 10.0)
    assert policy.before("g") == float("-inf")  # read once: nothing before
    key = policy.key("g")
    policy.access("g", 20.0)
    assert policy.before("g") == key < policy.key("g")
    for alone in ({"choose_probation": False}, {"choose_lirs": False}):  # probation and LIRS keep them too
        assert adaptive(start=SHORT, choose_admission=False, **alone).before("g") == float("-inf")
    with pytest.raises(ValueError, match="asking, probation or lirs shadows"):
        adaptive(start=SHORT, choose_admission=False, choose_probation=False, choose_lirs=False).before("g")


def test_a_switch_needs_a_clear_margin_in_several_decisions_in_a_row():
    choice = DampedChoice(3, hysteresis=0.1, patience=2, decay=0.0, decisive=5.0)  # candidates SHORT, MIDDLE, LONG
    short, long = 0, 2

    def round_of(long_hits: float, short_hits: float, active: int) -> int | None:
        return choice.round([short_hits, 0.0, long_hits], 1000.0, active)

    # within the hysteresis (0.1 of the active one's hits, fewer than its misses): nothing
    assert round_of(100.0, 105.0, active=long) is None and choice.wins == 0
    assert round_of(100.0, 400.0, active=long) is None and choice.wins == 1  # a clear win, once: not yet
    assert round_of(100.0, 400.0, active=long) == short  # twice in a row: switch
    assert choice.wins == 0
    # few misses: the margin is 0.1 of the misses (10), not of the hits (90): nothing
    assert round_of(905.0, 900.0, active=short) is None and round_of(905.0, 900.0, active=short) is None
    # removing 60 of 100 misses is a clear win, though a small share of the hits
    assert round_of(960.0, 900.0, active=short) is None and round_of(960.0, 900.0, active=short) == long
    assert choice.totals == [900.0, 0.0, 960.0] and choice.requested == 1000.0  # decay 0: the last round alone


def test_a_decisive_win_switches_at_once():
    """A gain beyond ``decisive`` times the smaller of the active one's hits and misses needs no patience; a
    clear gain below it waits for it."""
    choice = DampedChoice(3, hysteresis=0.1, patience=3, decay=0.0, decisive=1.0)
    short, middle, long = 0, 1, 2
    # long hits 100 of 1000: a gain of 80 is clear (> 10) but not decisive (<= 100): patience
    assert choice.round([180.0, 0.0, 100.0], 1000.0, long) is None and choice.wins == 1
    # a gain of 101 (> 100): at once, whatever won the rounds before
    assert choice.round([0.0, 201.0, 100.0], 1000.0, long) == middle
    assert choice.wins == 0 and choice.challenger == -1
    # the scale is the smaller of hits and misses: long hitting 900 of 1000 scales by its 100 misses
    choice = DampedChoice(3, hysteresis=0.1, patience=3, decay=0.0, decisive=0.5)
    assert choice.round([940.0, 0.0, 900.0], 1000.0, long) is None  # a gain of 40: clear, not decisive
    assert choice.round([960.0, 0.0, 900.0], 1000.0, long) == short  # 60 > 0.5 * 100


def test_the_half_life_follows_a_lasting_lead_not_one_round():
    """Two half-lives, one layout: a round in which the other half-life hits more, carried into the next by the
    quick totals, would pass a patience of two; the slowly decayed totals hold it back.  A lead that lasts
    switches in two rounds."""
    short, long = 0, 1

    def steady(choice) -> None:
        for _ in range(60):  # both hit 5 of 10 a round: the totals settle
            assert choice.round([5.0, 5.0], 10.0, long, 0) is None

    two_paces = TwoPaceChoice(2, 1, hysteresis=0.05, patience=2, decay=0.5, decisive=0.5, half_life_decay=0.9)
    one_pace = DampedChoice(2, hysteresis=0.05, patience=2, decay=0.5, decisive=0.5)
    steady(two_paces)
    for _ in range(60):
        one_pace.round([5.0, 5.0], 10.0, long)
    assert one_pace.round([7.0, 5.0], 10.0, long) is None and one_pace.round([5.0, 5.0], 10.0, long) == short
    assert two_paces.round([7.0, 5.0], 10.0, long, 0) is None and two_paces.round([5.0, 5.0], 10.0, long, 0) is None
    assert two_paces.quick.totals == one_pace.totals  # the quick totals are the same; the slow ones decide
    steady(two_paces)
    assert two_paces.round([7.0, 5.0], 10.0, long, 0) is None and two_paces.round([7.0, 5.0], 10.0, long, 0) == (
        short, 0)


def test_the_layout_follows_at_the_quick_pace_and_a_new_half_life_brings_its_best_layout():
    """Two half-lives, two layouts (shadows: short plain, long plain, short asking, long asking)."""
    choice = TwoPaceChoice(2, 2, hysteresis=0.05, patience=2, decay=0.5, decisive=10.0, half_life_decay=0.9)
    short, long, plain, asking = 0, 1, 0, 1
    for _ in range(60):
        assert choice.round([5.0, 5.0, 5.0, 5.0], 10.0, long, plain) is None
    # the long half-life's asking shadow leads: a change of layout, at the patience of the quick rule
    assert choice.round([5.0, 5.0, 5.0, 7.0], 10.0, long, plain) is None
    assert choice.round([5.0, 5.0, 5.0, 7.0], 10.0, long, plain) == (long, asking)
    # then the short half-life leads, asking (its plain shadow hits no more than before): one round is not
    # enough against the slow totals, the second is, and it comes with the layout that serves it best
    assert choice.round([5.0, 4.0, 8.0, 5.0], 10.0, long, asking) is None
    assert choice.round([5.0, 4.0, 8.0, 5.0], 10.0, long, asking) == (short, asking)


def test_one_round_against_the_question_leaves_it_only_if_the_slow_totals_agree():
    """One half-life, two layouts (shadows: plain, asking), the question held.  A scan read again at once is one
    round in which plain hits far more: decisive, but the slow totals still favour asking, so the question stays;
    the same lead in ``patience`` rounds in a row leaves it.  From plain, one such round switches at once."""
    plain, asking = 0, 1

    def settled(held: int | None, layout: int = asking) -> TwoPaceChoice:
        """A choice whose totals settled while ``layout`` ranked and hit 6 of 10 a round, the other layout 4."""
        choice = TwoPaceChoice(1, 2, hysteresis=0.05, patience=2, decay=0.5, decisive=0.5, half_life_decay=0.9,
                               held=held)
        hits = [4.0, 6.0] if layout == asking else [6.0, 4.0]
        for _ in range(60):
            assert choice.round(hits, 10.0, 0, layout) is None
        return choice

    burst = [10.0, 0.0]  # plain hits all 10 of the round, asking none
    assert settled(held=None).round(burst, 10.0, 0, asking) == (0, plain)  # decisive: at once
    held = settled(held=asking)
    assert held.round(burst, 10.0, 0, asking) is None
    assert held.slow.totals[plain] < held.slow.totals[asking] and held.quick.challenger == -1
    assert held.round([4.0, 6.0], 10.0, 0, asking) is None  # the lead was one round: asking stays
    held = settled(held=asking)
    lead = [7.0, 3.0]  # a lasting lead, not decisive: leaves in two rounds, whatever the slow totals say
    assert held.round(lead, 10.0, 0, asking) is None and held.round(lead, 10.0, 0, asking) == (0, plain)
    assert held.slow.totals[plain] < held.slow.totals[asking]
    from_plain = settled(held=asking, layout=plain)
    assert from_plain.round([0.0, 10.0], 10.0, 0, plain) == (0, asking)  # only the question is held


def test_a_small_lead_that_lasts_changes_the_layout_and_one_that_comes_and_goes_does_not():
    """One half-life, two layouts.  A lead of 0.1 of 10 bytes a round on average never passes the margin (5 % of the
    active layout's misses), but once it has lasted LASTING_ROUNDS rounds it is two standard errors and more: the
    layout changes.  A lead that changes sides every round never does."""
    first, second = 0, 1

    def choice() -> TwoPaceChoice:
        return TwoPaceChoice(1, 2, hysteresis=0.05, patience=2, decay=0.5, decisive=0.5, half_life_decay=0.9)

    lasting = choice()
    rounds = [[6.0, 6.2] if i % 2 else [6.0, 6.0] for i in range(40)]
    verdicts = [lasting.round(hits, 10.0, 0, first) for hits in rounds]
    switched = next(i for i, verdict in enumerate(verdicts) if verdict is not None)
    assert verdicts[switched] == (0, second) and LASTING_ROUNDS <= switched < 20
    assert lasting.lasting.z(0, first, second) > 2.0 > lasting.lasting.z(0, second, first)

    coming_and_going = choice()
    for i in range(200):
        hits = [6.0, 6.2] if i % 2 else [6.2, 6.0]
        assert coming_and_going.round(hits, 10.0, 0, first) is None
    assert abs(coming_and_going.lasting.z(0, first, second)) < 1.0
    without = TwoPaceChoice(1, 2, hysteresis=0.05, patience=2, decay=0.5, decisive=0.5, half_life_decay=0.9,
                            lasting_z=0.0)
    assert all(without.round(hits, 10.0, 0, first) is None for hits in rounds)  # the margin alone: never

    over = choice()  # the second layout led for 30 rounds (while it ranked); the latest round the first leads
    for _ in range(30):
        assert over.round([6.0, 6.2], 10.0, 0, second) is None
    assert over.round([7.0, 6.0], 10.0, 0, first) is None  # a lead that lasted, but is not ahead lately
    assert over.lasting.z(0, first, second) > 2.0 and over.quick.totals[first] > over.quick.totals[second]


def test_a_layout_leads_strictly_or_level_with_those_not_clearly_behind():
    """The rule by which a cache on probation settles (TwoPaceChoice.leads), one half-life, three layouts (plain,
    asking, probation): first strictly; or level with plain while asking is behind by more than the margin; not
    while asking is behind by less (it may pay late), nor while the shadows are level (nothing has shown)."""
    asking, probation = 1, 2  # (plain is 0)

    def after(hits: list[float]) -> TwoPaceChoice:
        choice = TwoPaceChoice(1, 3, hysteresis=0.05, patience=2, decay=0.5, decisive=0.5, half_life_decay=0.9,
                               held=asking)
        for _ in range(30):
            choice.round(hits, 10.0, 0, probation)
        return choice

    assert after([5.0, 3.0, 5.1]).leads(0, probation, level=False)
    assert after([5.0, 3.0, 5.1]).leads(0, probation, level=True)  # strictly first: even while level
    assert after([5.0, 3.0, 5.0]).leads(0, probation, level=False)
    assert not after([5.0, 3.0, 5.0]).leads(0, probation, level=True)
    assert not after([5.0, 4.99, 5.0]).leads(0, probation, level=False)  # the question is within the margin
    assert not after([5.1, 3.0, 5.0]).leads(0, probation, level=False)
    assert after([5.0, 5.0, 5.0]).leads(0, probation, level=False)  # all level, once the shadows have shown


def test_noise_does_not_flap_the_choice():
    """Every candidate hits alike when the working set fits: the choice stays where it started (the layout is the
    smaller shadows' pick, which is no switch: nothing tells the cache's own shadows apart)."""
    policy = adaptive(start=MIDDLE, capacity=100)
    rng = random.Random(2)
    for t in range(1, 20_001):
        policy.access(rng.randrange(60), t)
    assert policy.switches == 0 and policy.half_life == MIDDLE and policy.smaller is not None


def read_twice_at_once(groups: int, start: int = 0):
    """Each group read twice in a row, and never again: a cache that admits it at once hits its second read."""
    t = 0
    for g in range(start, start + groups):
        for _ in range(2):
            t += 1
            yield t, g


def test_the_smaller_shadows_replay_what_a_policy_of_their_size_would():
    """The smaller shadows (one per layout at the starting half-life, SMALLER_SHARE of the size) hold what a
    policy of that size holds there, through a halving of the sample, and their hits go to a layout choice of
    their own (in the larger policy's rounds)."""
    policy = adaptive(start=MIDDLE, capacity=800, max_sampled=150)
    alone = adaptive(start=MIDDLE, capacity=800 * SMALLER_SHARE, max_sampled=150, smaller_share=0.0)
    rng = random.Random(4)
    for t in range(1, 6001):
        group = rng.randrange(250)
        for p in (policy, alone):
            p.access(group, t, size=float(1 + group % 3))
    assert policy.smaller is not None and policy.sample_rate == alone.sample_rate == 0.5  # it halved, still level
    mine, nc = len(policy.scores()), len(policy.half_lives)
    for layout in range(len(policy.layouts)):
        held, used, _ = policy.shadow(mine + layout)
        theirs, their_used, _ = alone.shadow(policy.active + nc * layout)
        assert held == theirs and used == their_used and 0 < used <= 800 * SMALLER_SHARE * policy.sample_rate
    assert policy.smaller.requested > 0 and max(policy.smaller.totals) > 0  # judged by their own choice


def test_until_its_own_shadows_differ_the_cache_starts_from_the_smaller_ones_pick():
    """A cache eight times larger than what is read so far has nothing to tell its shadows apart: it starts asking,
    but the smaller shadows have seen the question keep every group out until its second read, which comes at
    once, so it stops asking without a switch.  Once its own shadows differ, they decide, and the smaller ones are
    retired (empty, their hits 0)."""
    policy = adaptive(start=MIDDLE, capacity=4000, choose_lirs=False)
    assert policy.admitting and policy.smaller is not None
    for t, g in read_twice_at_once(3000):
        policy.access(g, t)
    assert not policy.admitting and policy.switches == 0 and policy.smaller is not None
    assert not policy.settled  # its own shadows are level: whatever the smaller ones picked, nothing settles
    for t, g in read_twice_at_once(20_000, start=3000):
        policy.access(g, 6000 + t)
    assert policy.smaller is None and not policy.admitting
    mine = len(policy.scores())
    assert all(policy.shadow(mine + layout) == ({}, 0.0, 0.0) for layout in range(len(policy.layouts)))
    assert policy.candidates()[0].residents  # its own shadows go on


def test_the_kernel_refuses_a_smaller_share_out_of_range_and_a_shadow_it_does_not_have():
    policy = adaptive(start=MIDDLE)
    for share in (-0.1, 1.0, math.nan):
        with pytest.raises(ValueError, match="smaller"):
            policy._configure([1.0], 0, (PLAIN,), share)
    for first in (0, 10_000):
        with pytest.raises(ValueError, match="no such shadow"):
            policy._retire(first)


def test_with_one_layout_there_are_no_smaller_shadows():
    policy = adaptive(start=MIDDLE, choose_admission=False, choose_probation=False, choose_lirs=False)
    assert policy.smaller is None and len(policy.scores()) == 3
    with pytest.raises(ValueError, match="no such candidate"):
        policy.shadow(3)  # three shadows: one per candidate


def test_without_smaller_shadows_it_asks_until_its_own_shadows_tell():
    policy = adaptive(start=MIDDLE, capacity=4000, smaller_share=0.0, choose_lirs=False)
    for t, g in read_twice_at_once(3000):
        policy.access(g, t)
    assert policy.admitting and policy.smaller is None


@pytest.mark.parametrize("longest, shadow_capacity, accesses, requested, length", [
    (1000, 500.0, 1000, 1000.0, 500),  # as many accesses as the shadows hold groups of size 1
    (1000, 500.0, 100, 1000.0, SHORTEST_ROUND),  # groups of 10 bytes: 50 fit, but a round is never that short
    (1000, 5000.0, 1000, 2000.0, 1000),  # 2,500 groups: at most the longest round
    (1000, 500.0, 0, 0.0, 1000),  # nothing asked for in the round: nothing to go by
    (50, 500.0, 1000, 1000.0, 50),  # a longest round below the shortest is still the longest
])
def test_a_round_lasts_about_one_turnover_of_the_shadow_caches(longest, shadow_capacity, accesses, requested,
                                                               length):
    assert round_length(longest, shadow_capacity, accesses, requested) == length


def test_a_small_cache_decides_in_shorter_rounds_than_a_large_one():
    """After its first round, a policy whose shadows hold 300 groups decides every 300 sampled accesses; one
    whose shadows could hold more groups than a round has decides every ``decision_every``."""
    small, large = adaptive(start=MIDDLE, capacity=300, decision_every=1000), \
        adaptive(start=MIDDLE, capacity=5000, decision_every=1000)
    rng = random.Random(4)
    for t in range(1, 1001):
        group = rng.randrange(2000)
        small.access(group, t)
        large.access(group, t)
    assert (small.decision_every, large.decision_every) == (300, 1000)
    assert small.longest_round == large.longest_round == 1000


def test_the_sample_halves_to_its_budget():
    policy = adaptive(start=LONG, capacity=10_000, max_sampled=256)
    for t in range(1, 5001):
        policy.access(t, t)
    assert policy.sampled_groups <= 256
    assert policy.sample_rate < 1.0
    assert all(c.used <= policy.sample_rate * policy.capacity for c in policy.candidates())


def test_another_sample_seed_samples_other_groups_and_the_same_keys():
    policies = [adaptive(start=LONG, capacity=10_000, max_sampled=256, sample_seed=seed) for seed in (0, 0, 1)]
    for policy in policies:
        for t in range(1, 5001):
            policy.access(t, t)
    sampled = [{g for c in policy.candidates() for g in c.residents} for policy in policies]
    assert sampled[0] == sampled[1] and sampled[0] != sampled[2]  # one seed, one sample; another, another
    assert all(policy.sampled_groups <= 256 for policy in policies)
    assert all(policies[0].table(c) == policies[2].table(c) for c in range(3))  # the keys never depend on it
    assert sample_salt(0) == 0 and len({sample_salt(seed) for seed in range(100)}) == 100


def test_without_a_capacity_it_is_plain_lrfu():
    policy = AdaptiveLRFUPolicy(half_life=SHORT, half_lives=(SHORT, LONG))
    for t, g in hot_among_scans(3000):
        policy.access(g, t)
    assert policy.half_life == SHORT and policy.switches == 0


@pytest.mark.parametrize("options, problem", [
    ({"half_lives": (0.0, 10.0)}, "half_lives"),
    ({"sample_rate": 0.0}, "sample_rate"),
    ({"patience": 0}, "patience"),
    ({"decay": 1.0}, "decay"),
    ({"decisive": -0.5}, "decisive"),
    ({"half_life_decay": 1.0}, "half_life_decay"),
    ({"smaller_share": 1.0}, "smaller_share"),
])
def test_bad_options_are_refused_by_name(options, problem):
    with pytest.raises(ValueError, match=problem):
        AdaptiveLRFUPolicy(**options)


@pytest.mark.parametrize("key, value", [("adaptive_half_lives", [300.0, -1.0]), ("adaptive_half_lives", []),
                                        ("adaptive_max_sampled", 0)])
def test_the_coordinator_config_names_the_key_and_the_file(key, value):
    with pytest.raises(ConfigError) as caught:
        validate({key: value}, CoordinatorComponent.config_schema, "/etc/htda/node.toml", "coordinator.")
    assert "/etc/htda/node.toml" in str(caught.value) and f"'coordinator.{key}'" in str(caught.value)


def test_the_simulator_re_sorts_its_cache_on_a_switch():
    rating = adaptive(start=LONG, capacity=50)
    cache = HTDAPolicy(50, rating, accesses="request")
    times, ids = zip(*drifting())
    hits, _ = cache.replay(list(times), list(ids), [1] * len(ids), [-1] * len(ids))
    assert rating.switches == 1
    plain = HTDAPolicy(50, LRFUPolicy(half_life=LONG), accesses="request")
    plain_hits, _ = plain.replay(list(times), list(ids), [1] * len(ids), [-1] * len(ids))
    assert hits > 2 * plain_hits


def test_the_coordinator_rates_with_the_adaptive_half_life_by_default(inprocess_node):
    node = inprocess_node("coord", ["coordinator"], sections={"coordinator": {
        "half_life": 3600.0, "adaptive_half_lives": [600.0, 7200.0], "adaptive_max_sampled": 100}})
    policy = node.components["coordinator"].core.state.policy
    assert isinstance(policy, AdaptiveLRFUPolicy)
    assert policy.half_lives == [600.0, 3600.0, 7200.0] and policy.half_life == 3600.0
    assert policy.max_sampled == 100


def test_the_coordinator_shows_and_logs_what_its_rating_chose(inprocess_node, caplog):
    node = inprocess_node("coord", ["coordinator"], sections={"coordinator": {
        "half_life": 5.0, "adaptive_half_lives": [5.0], "adaptive_max_sampled": 100000}})  # only admission to choose
    coordinator = node.components["coordinator"]
    policy = coordinator.core.state.policy
    text = node.metrics.render()
    assert "htda_coordinator_rating_half_life_seconds 5" in text
    assert "htda_coordinator_rating_admitting 1" in text and "htda_coordinator_rating_switches 0" in text
    assert "htda_coordinator_rating_smaller_shadows 1" in text
    policy.set_capacity(50)
    for t, g in drifting():  # a working set that moves on: asking only delays the new groups
        policy.access(g, t)
    text = node.metrics.render()
    assert not policy.admitting and "htda_coordinator_rating_admitting 0" in text
    assert "htda_coordinator_rating_smaller_shadows 0" in text  # the placement filled: its own shadows tell
    with caplog.at_level("INFO"):
        coordinator._log_switches()
        coordinator._log_switches()  # once per switch
    said = [r.getMessage() for r in caplog.records if "rating:" in r.getMessage()]
    assert said == ["rating: ranking with a half-life of 5 s, admitting every group "
                    "(switch 1 since start, by its shadow caches)"]


def test_the_coordinator_shows_and_logs_probation(inprocess_node, caplog):
    node = inprocess_node("coord", ["coordinator"], sections={"coordinator": {
        "half_life": SHORT, "adaptive_half_lives": [SHORT, MIDDLE, LONG], "adaptive_max_sampled": 100000}})
    coordinator = node.components["coordinator"]
    policy = coordinator.core.state.policy
    assert "htda_coordinator_rating_probation 0" in node.metrics.render()
    policy.set_capacity(60)
    for t, g in pairs_among_scans():
        policy.access(g, t)
    text = node.metrics.render()
    assert policy.probation and "htda_coordinator_rating_probation 1" in text
    shares = {(line.split('half_life_seconds="')[1].split('"')[0], line.split('layout="')[1].split('"')[0]):
              float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
              if line.startswith("htda_coordinator_rating_shadow_hit_ratio{")}
    assert len(shares) == 12 and all(0.0 <= share <= 1.0 for share in shares.values())
    assert max(shares, key=shares.__getitem__) == (f"{policy.half_life:g}", "probation")  # the winner's, shown
    assert shares == pytest.approx({key: share for key, share in policy.shadow_hit_ratios().items()})
    with caplog.at_level("INFO"):
        coordinator._log_switches()
    said = [r.getMessage() for r in caplog.records if "rating:" in r.getMessage()]
    assert len(said) == 1 and "putting new groups on probation" in said[0]


def test_adaptive_probation_false_leaves_the_probation_shadows_out(inprocess_node):
    node = inprocess_node("coord", ["coordinator"], sections={"coordinator": {"adaptive_probation": False}})
    policy = node.components["coordinator"].core.state.policy
    assert policy.layouts == (PLAIN, ASKING, LIRS) and len(policy.scores()) == 3 * len(policy.half_lives)


def test_adaptive_lirs_false_leaves_the_lirs_shadows_out_and_starts_asking(inprocess_node):
    node = inprocess_node("coord", ["coordinator"], sections={"coordinator": {"adaptive_lirs": False}})
    policy = node.components["coordinator"].core.state.policy
    assert policy.layouts == (PLAIN, ASKING, PROBATION) and len(policy.scores()) == 3 * len(policy.half_lives)
    policy.set_capacity(10)
    assert policy.layout == ASKING


def test_adaptive_false_keeps_the_fixed_half_life(inprocess_node):
    node = inprocess_node("coord", ["coordinator"], sections={"coordinator": {"adaptive": False}})
    assert type(node.components["coordinator"].core.state.policy) is LRFUPolicy


def test_forgetting_a_group_drops_it_from_every_table_and_shadow():
    policy = adaptive(start=LONG, capacity=50)
    for t, g in drifting(phases=1, rounds=2):
        policy.access(g, t, size=1.0)
    policy.forget(3)
    candidates = policy.candidates()
    assert 3 not in policy and all(3 not in c.keys and 3 not in c.residents for c in candidates)
    assert all(c.used == sum(c.residents.values()) for c in candidates) and candidates[0].residents


def test_an_access_takes_its_arguments_by_position_or_name_and_refuses_bad_ones_before_recording():
    policy = adaptive(start=LONG)
    policy.access("a", 1.0, size=2.0)
    policy.access(t=2, group="b", weight=2.0)
    assert set(policy.keys()) == {"a", "b"} and policy.take_touched() == {"a", "b"}
    for args, kwargs, error in ((("c", 3.0, 0.0), {}, ValueError), (("c", 3.0, 1.0, -1.0), {}, ValueError),
                                (("c",), {}, TypeError), (("c", 3.0), {"sizes": 1.0}, TypeError),
                                (("c", 3.0), {"t": 3.0}, TypeError), ((["c"], 3.0), {}, TypeError)):
        with pytest.raises(error):
            policy.access(*args, **kwargs)
    assert "c" not in policy and not policy.take_touched()


def test_a_policy_in_a_reference_cycle_is_collected():
    policy = adaptive(start=LONG)
    for t, g in drifting(phases=1, rounds=2):
        policy.access(g, t)
    policy.on_switch = policy.take_touched  # the policy refers to itself
    gone = weakref.ref(policy)
    del policy
    gc.collect()
    assert gone() is None


class Group:
    """A group object that may refer back to its policy (a reference cycle through the kernel's index)."""

    def __init__(self, name: str):
        self.name, self.policy = name, None

    def __hash__(self) -> int:
        return hash(self.name)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Group) and other.name == self.name


def test_the_kernel_holds_each_group_until_it_is_forgotten_and_finds_it_by_an_equal_one():
    policy = adaptive(start=LONG)
    group = Group("a")
    policy.access(group, 1.0)
    held = weakref.ref(group)
    del group
    gc.collect()
    assert held() is not None  # the index's own reference (the keys dict has one too)
    policy.access(Group("a"), 2.0)  # an equal group, not the same object: the same slot
    assert len(policy) == 1 and policy.key(Group("a")) == log_add(1.0 / LONG, 2.0 / LONG)
    policy.forget(Group("a"))
    gc.collect()
    assert held() is None and len(policy) == 0


def test_a_cycle_through_a_group_the_kernel_holds_is_collected():
    policy = adaptive(start=LONG)
    group = Group("a")
    policy.access(group, 1.0)
    group.policy = policy
    gone = weakref.ref(policy)
    del policy, group
    gc.collect()
    assert gone() is None


def test_the_sample_salt_is_set_before_the_first_group():
    policy = adaptive(start=LONG)
    policy._sample_salt = 7  # nothing keyed yet
    policy.access("a", 1.0)
    policy._sample_salt = 7  # the same salt again: nothing changes
    with pytest.raises(ValueError, match="before the first group"):
        policy._sample_salt = 8
    assert policy._sample_salt == 7 and "a" in policy


class Colliding(Group):
    """A group whose hash is one of a few values: its slot is found among long runs of others of the same hash."""

    def __hash__(self) -> int:
        return hash(self.name) % 3


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_groups_of_colliding_hashes_are_found_and_forgotten_as_a_dict_would(seed):
    # the kernel's index probes linearly and deletes by moving entries back: with every hash one of three, each
    # lookup walks a long run, and each forget moves the run behind it
    rng = random.Random(seed)
    policy = adaptive(start=MIDDLE, half_lives=(MIDDLE,))  # one candidate: the active half-life never changes
    keys: dict[Colliding, float] = {}  # the model: the LRFU key at that half-life
    for t in range(1, 3001):
        group = Colliding(str(rng.randrange(400)))
        if rng.random() < 0.25:
            policy.forget(group)
            keys.pop(group, None)
        else:
            policy.access(group, float(t), size=1.0)
            keys[group] = log_add(keys.get(group, NEVER), t / MIDDLE)
        if t % 100 == 0:
            assert len(policy) == len(keys)
            assert all(policy.key(g) == pytest.approx(k, rel=1e-12) for g, k in keys.items())
    assert all(Colliding(str(n)) not in policy for n in range(400) if Colliding(str(n)) not in keys)


def test_getsizeof_counts_the_kernels_own_tables():
    # what sys.getsizeof says of the policy includes its C tables: bench/state_memory.py sizes the coordinator by it
    policy = adaptive(start=LONG)
    empty = sys.getsizeof(policy)
    for g in range(5000):
        policy.access(g, float(g), size=1.0)
    keys_alone = 5000 * len(policy.half_lives) * 8  # one double per candidate, before the slots' other fields
    assert sys.getsizeof(policy) - empty > keys_alone


# The reference's parts for what the C kernel does (htda/coordinator/_adaptive.c): the sampling hash and a shadow
# cache, in Python.

_MIX1 = 0x9E3779B97F4A7C15
_MIX2 = 0xBF58476D1CE4E5B9
_M64 = (1 << 64) - 1


def sample_hash(group: object, salt: int = 0) -> int:
    """A well-spread 64-bit hash of ``group`` (splitmix64's finaliser over Python's hash, xor ``salt``): the group is
    sampled while it is below the sampling rate times 2**64."""
    h = (((hash(group) & _M64) ^ salt) * _MIX1) & _M64
    h ^= h >> 29
    h = (h * _MIX2) & _M64
    return h ^ (h >> 32)


class ShadowCache:
    """A miniature cache of the sampled groups, evicting the lowest key of one candidate half-life.

    ``resident`` maps each group it holds to its size when last accessed, ``used`` is their sum, ``hits`` the
    bytes hit in the current round; ``heap`` holds ``(key when pushed, group)`` of each resident of the main part,
    lazily: a key that grew since is pushed again when it comes up (keys only grow).  A ``probation`` shadow
    also has S3-FIFO's queue (``queue``: group -> read again since it came in, oldest first; ``queued`` bytes) and
    ghost list (``ghost``: group -> its size when it left the queue unread; ``ghosted`` bytes).  A ``lirs`` shadow
    keeps its main part (the heap) as LIRS's protected set and its other residents in ``queue``, oldest first."""

    __slots__ = ("keys", "resident", "heap", "used", "hits", "probation", "lirs", "queue", "queued", "ghost",
                 "ghosted")

    def __init__(self, keys: dict, probation: bool = False, lirs: bool = False):
        self.keys = keys  # this candidate's key table (shared with the policy)
        self.resident: dict[Any, float] = {}
        self.heap: list[tuple[float, Any]] = []
        self.used = 0.0
        self.hits = 0.0
        self.probation = probation
        self.lirs = lirs
        self.queue: OrderedDict[Any, bool] = OrderedDict()
        self.ghost: OrderedDict[Any, float] = OrderedDict()
        self.queued = self.ghosted = 0.0

    def hit(self, group: Any, size: float) -> None:
        self.hits += size
        self.used += size - self.resident[group]
        if group in self.queue:
            self.queued += size - self.resident[group]
            self.queue[group] = True
        self.resident[group] = size

    def enter(self, group: Any, size: float, capacity: float) -> None:
        """A missed group of a probation shadow: back from the ghost list to the main part, or queued."""
        if group in self.ghost:
            self.ghosted -= self.ghost.pop(group)
            heapq.heappush(self.heap, (self.keys[group], group))
        else:
            self.queue[group] = False
            self.queued += size
        self.resident[group] = size
        self.used += size
        self.evict(capacity)

    def lowest(self) -> float:
        """The lowest key of the main part (not empty), once the entries above it that went stale (their groups
        accessed since they were pushed: keys only grow) are pushed again with their keys now."""
        heap, keys = self.heap, self.keys
        while True:
            key, victim = heap[0]
            current = keys[victim]
            if current == key:
                return key
            heapq.heapreplace(heap, (current, victim))

    def drop_lowest(self) -> None:
        self.lowest()
        _, victim = heapq.heappop(self.heap)
        self.used -= self.resident.pop(victim)

    def evict(self, capacity: float) -> None:
        """Drop the lowest keys until the residents fit ``capacity`` (probation: the queue's oldest first while it
        holds its share, to the main part if read again, else to the ghost list; LIRS: the queue's oldest first)."""
        if self.lirs:
            self.lirs_evict(capacity)
            return
        while self.used > capacity:
            if self.queue and (self.queued >= PROBATION_SHARE * capacity or not self.heap):
                group, read_again = self.queue.popitem(last=False)
                self.queued -= self.resident[group]
                if read_again:
                    heapq.heappush(self.heap, (self.keys[group], group))
                    continue
                size = self.resident.pop(group)
                self.used -= size
                self.ghost[group] = size
                self.ghosted += size
                while self.ghosted > (1.0 - PROBATION_SHARE) * capacity and self.ghost:
                    self.ghosted -= self.ghost.popitem(last=False)[1]
            elif self.heap:
                self.drop_lowest()
            else:
                return

    def admit(self, before: float, size: float, capacity: float) -> bool:
        """The admission question for a group whose key before this access was ``before``: the lowest keys go
        while they are below it and ``size`` does not fit; False (the group stays out, the victims that went
        stay gone) at the first that is not."""
        while self.used + size > capacity and self.heap:
            if before <= self.lowest():
                return False
            self.drop_lowest()
        return True

    def lirs_access(self, group: Any, size: float, before: float, capacity: float) -> None:
        """An access of a LIRS shadow, a hit or a miss that fits: a resident of the main part stays; a queued group
        or a new one joins the main part if it has room or if ``before`` (the group's key before this access)
        beats its lowest key, else goes to the queue's tail; then the main part's lowest go to the queue while it
        holds more than its share, and the queue's oldest leave while the shadow is over ``capacity``."""
        share = (1.0 - LIRS_SHARE) * capacity
        if group in self.resident:  # (a hit evicts nothing, as in every layout)
            self.hit(group, size)
            if group in self.queue:
                recent = self.lirs_recent(before)
                self.queued -= self.resident[group]
                del self.queue[group]
                self.lirs_place(group, recent, share)
            return
        recent = self.used - self.queued + size <= share or self.lirs_recent(before)
        self.resident[group] = size
        self.used += size
        self.lirs_place(group, recent, share)
        if self.used > capacity:
            self.lirs_evict(capacity)

    def lirs_place(self, group: Any, recent: bool, share: float) -> None:
        """Into the main part, whose lowest then go to the queue while it holds more than ``share``; or queued."""
        if not recent:
            self.queue[group] = False
            self.queued += self.resident[group]
            return
        heapq.heappush(self.heap, (self.keys[group], group))
        while len(self.heap) > 1 and self.used - self.queued > share:
            self.lowest()
            _, low = heapq.heappop(self.heap)
            self.queue[low] = False
            self.queued += self.resident[low]

    def lirs_recent(self, before: float) -> bool:
        return bool(self.heap) and before != NEVER and before > self.lowest()

    def lirs_evict(self, capacity: float) -> None:
        while self.used > capacity:
            if self.queue:
                group, _ = self.queue.popitem(last=False)
                size = self.resident.pop(group)
                self.queued -= size
                self.used -= size
            elif self.heap:
                self.drop_lowest()
            else:
                return

    def discard(self, groups: Collection[Any]) -> None:
        """Drop ``groups`` (those resident, queued or in the ghost list) without counting anything: they left the
        sample, or were forgotten."""
        self.resident = {g: size for g, size in self.resident.items() if g not in groups}
        self.heap = [(key, g) for key, g in self.heap if g in self.resident]
        heapq.heapify(self.heap)
        self.used = sum(self.resident.values())
        self.queue = OrderedDict((g, read) for g, read in self.queue.items() if g not in groups)
        self.ghost = OrderedDict((g, size) for g, size in self.ghost.items() if g not in groups)
        self.queued = sum(self.resident[g] for g in self.queue)
        self.ghosted = sum(self.ghost.values())


class _Straightforward(RatingPolicy):
    """The reference for the C kernel, from the module docstring and nothing of the fast policy but its decision
    rule (TwoPaceChoice): every access log-adds at each candidate with :func:`log_add`, samples the group by its
    hash (sample_hash), plays every shadow cache plainly (ShadowCache: push, then evict the lowest keys while
    over; an admission shadow asks ShadowCache.admit first), the smaller shadows as the others at their share of
    the size; a switch copies the winner's keys into the ranked table (the same dict object)."""

    def __init__(self, half_life, half_lives, capacity=0.0, sample_rate=1.0, max_sampled=16384, decision_every=1000,
                 hysteresis=0.05, patience=2, decay=0.5, choose_admission=True, start_admitting=True,
                 choose_probation=True, smaller_share=SMALLER_SHARE, sample_seed=0, choose_lirs=True):
        super().__init__(half_life)
        self.salt = sample_salt(sample_seed)
        self.half_lives = sorted({float(h) for h in half_lives} | {self.half_life})
        self.active = self.half_lives.index(self.half_life)
        self.tables = [{} for _ in self.half_lives]
        self.befores = [{} for _ in self.half_lives]  # each group's key before its latest access
        self.sample_rate, self.threshold = sample_rate, int(sample_rate * (1 << 64))
        self.max_sampled, self.decision_every = max_sampled, decision_every
        self.round_length = decision_every
        self.sampled = set()
        self.layouts = [PLAIN] + [ASKING] * choose_admission + [PROBATION] * choose_probation + [LIRS] * choose_lirs
        # a shadow per layout and candidate, then (smaller_share) one more per layout at the starting candidate,
        # if there are layouts to choose among
        smaller_share = smaller_share if len(self.layouts) > 1 else 0.0
        nc = len(self.tables)
        self.befores_of = [c for _ in self.layouts for c in range(nc)]  # each shadow's candidate
        self.befores_of += [self.active] * len(self.layouts) * bool(smaller_share)
        layouts = [layout for layout in self.layouts for _ in self.tables] + self.layouts * bool(smaller_share)
        self.shares = [1.0] * nc * len(self.layouts) + [smaller_share] * len(self.layouts) * bool(smaller_share)
        self.shadows = [ShadowCache(self.tables[c], layout == PROBATION, layout == LIRS)
                        for c, layout in zip(self.befores_of, layouts)]
        self.asks = [layout == ASKING for layout in layouts]
        self.layout = PLAIN
        self.settled = False
        held = LIRS if choose_lirs else ASKING if choose_admission else None  # the question's layout
        self.start_layout = held if held is not None and start_admitting else PLAIN
        self.choice = TwoPaceChoice(len(self.tables), len(self.layouts), hysteresis, patience, decay,
                                    held=None if held is None else self.layouts.index(held))
        self.smaller = DampedChoice(len(self.layouts), hysteresis, patience, decay) if smaller_share else None
        self.smaller_pick = self.layouts.index(self.start_layout)
        self.round, self.round_bytes = 0, 0.0
        self.history, self.switches, self.on_switch = [], 0, None
        self.set_capacity(capacity)

    @property
    def admitting(self):
        return self.layout == ASKING

    def set_capacity(self, capacity):
        if not capacity or not getattr(self, "capacity", 0):  # no shadows: plain; shadows anew: as at start
            self.layout = self.start_layout if capacity else PLAIN
        self.capacity = capacity
        for shadow, share in zip(self.shadows, self.shares):
            shadow.evict(self.sample_rate * capacity * share)

    def _key_after(self, key, t, weight):
        raise AssertionError("access() is the reference's own")

    def offset(self, now):
        return (now - self.epoch) / self.half_life

    def access(self, group, t, weight=1.0, size=1.0):
        self._now = t
        for table, before, h in zip(self.tables, self.befores, self.half_lives):
            before[group] = table.get(group, NEVER)
            table[group] = log_add(table.get(group, NEVER), math.log2(weight) + (t - self.epoch) * (1.0 / h))
        self._keys[group] = self.tables[self.active][group]
        self._touched.add(group)
        if not self.capacity or sample_hash(group, self.salt) >= self.threshold:
            return
        if group not in self.sampled:
            self.sampled.add(group)
            if len(self.sampled) > self.max_sampled:
                self.halve()
                if sample_hash(group, self.salt) >= self.threshold:
                    return
        for k, (shadow, asks, share) in enumerate(zip(self.shadows, self.asks, self.shares)):
            capacity = self.sample_rate * self.capacity * share
            if shadow.lirs:
                if group in shadow.resident or size <= capacity:
                    shadow.lirs_access(group, size, self.befores[self.befores_of[k]][group], capacity)
            elif group in shadow.resident:
                shadow.hit(group, size)
            elif size <= capacity and shadow.probation:
                shadow.enter(group, size, capacity)
            elif size <= capacity:
                if asks and not shadow.admit(self.befores[self.befores_of[k]][group], size, capacity):
                    continue
                shadow.resident[group] = size
                heapq.heappush(shadow.heap, (shadow.keys[group], group))
                shadow.used += size
                shadow.evict(capacity)
        self.round += 1
        self.round_bytes += size
        if self.round >= self.round_length:
            self.decide(t)

    def decide(self, t):
        """The end of a round: the smaller shadows' choice, then the cache's own; while its own shadows have all hit
        alike so far its layout is the smaller ones' pick (if at its half-life), and once they differ the smaller
        ones go."""
        mine = len(self.tables) * len(self.layouts)
        hits = [shadow.hits for shadow in self.shadows]
        for shadow in self.shadows:
            shadow.hits = 0.0
        level = len(set(hits[:mine])) == 1 and len(set(self.choice.quick.totals)) == 1
        if self.smaller is not None:
            to = self.smaller.round(hits[mine:], self.round_bytes, self.smaller_pick)
            self.smaller_pick = self.smaller_pick if to is None else to
        to = self.choice.round(hits[:mine], self.round_bytes, self.active, self.layouts.index(self.layout))
        self.round_length = round_length(self.decision_every, self.sample_rate * self.capacity, self.round,
                                         self.round_bytes)
        self.round, self.round_bytes = 0, 0.0
        if to is not None:
            self.switch(to[0], self.layouts[to[1]], t)
        self.settled = self.layout == PROBATION and self.choice.leads(self.active, self.layouts.index(PROBATION),
                                                                      level and self.smaller is not None)
        if self.smaller is not None and not level:
            self.smaller = None
            del self.shadows[mine:], self.asks[mine:], self.shares[mine:], self.befores_of[mine:]
        elif self.smaller is not None:
            self.layout = self.layouts[self.smaller_pick]

    def halve(self):
        self.sample_rate /= 2
        self.threshold //= 2
        left = {g for g in self.sampled if sample_hash(g, self.salt) >= self.threshold}
        self.sampled -= left
        for shadow, share in zip(self.shadows, self.shares):
            shadow.discard(left)
            shadow.evict(self.sample_rate * self.capacity * share)

    def set_key(self, group, key):
        super().set_key(group, key)
        ref = self._now - self.epoch
        for i, (table, h) in enumerate(zip(self.tables, self.half_lives)):
            table[group] = key if i == self.active else key - ref / self.half_life + ref / h

    def before(self, group):
        return self.befores[self.active].get(group, NEVER)

    def forget(self, group):
        super().forget(group)
        for table in self.tables + self.befores:
            table.pop(group, None)
        self.sampled.discard(group)
        for shadow in self.shadows:
            if group in shadow.resident or group in shadow.ghost:
                shadow.discard((group,))

    def switch(self, to, layout, t):
        self.switches += 1
        self.layout = layout
        rekeyed = to != self.active
        if rekeyed:
            self.active, self.half_life = to, self.half_lives[to]
            self._keys.clear()
            self._keys.update(self.tables[to])
            self._touched.update(self._keys)
        self.history.append((t, self.half_life, LAYOUTS[layout]))
        if rekeyed and self.on_switch is not None:
            self.on_switch()


def _random_trace(n: int = 30_000, seed: int = 3):
    """Phases that alternate between a drifting working set (the short half-life wins) and hot groups among
    scans (a long one wins), with sizes that change now and then."""
    rng = random.Random(seed)
    sizes: dict = {}
    t = 0.0
    for i in range(n):
        t += rng.choice((0.0, 1.0, 2.0))
        phase = i // 3000
        if phase % 2:
            group = 100_000 + i if rng.random() < 0.5 else rng.randrange(100)  # hot groups among groups read once
        else:
            group = 1000 + (i // 300) * 30 + rng.randrange(30)  # a working set that moves on
        if group not in sizes or rng.random() < 0.01:
            sizes[group] = float(rng.randrange(1, 8))
        yield group, t, sizes[group]


def _options() -> dict:
    return {"half_lives": (SHORT, MIDDLE, LONG), "decision_every": 300, "max_sampled": 2000, "capacity": 400.0,
            "patience": 1, "hysteresis": 0.02}


@pytest.mark.parametrize("choose_admission, choose_probation, choose_lirs, sample_seed, fraction", [
    (True, True, True, 0, 0.0), (True, True, False, 0, 0.0), (True, False, False, 0, 0.0),
    (False, True, False, 0, 0.0), (False, False, True, 0, 0.0), (False, False, False, 0, 0.0),
    (True, True, True, 7, 0.0), (True, True, True, 0, 0.1), (False, False, True, 0, 0.1)])
def test_the_fast_path_decides_as_the_straightforward_reference(choose_admission, choose_probation, choose_lirs,
                                                                sample_seed, fraction):
    """Keys, sample, shadows and decisions of the C kernel are the reference's, bit for bit, through switches
    (of half-life and of layout), halvings of the sample, restored keys, forgotten groups and new sizes of the
    cache.  Sizes that are not whole numbers (``fraction``) take the kernel's other way of summing what a shadow
    holds after a halving: in the order it came in, as the reference's dict sums it."""
    options = {**_options(), "choose_admission": choose_admission, "choose_probation": choose_probation,
               "choose_lirs": choose_lirs, "sample_seed": sample_seed}
    fast, reference = AdaptiveLRFUPolicy(half_life=MIDDLE, **options), _Straightforward(half_life=MIDDLE, **options)
    rng = random.Random(5)
    for i, (group, t, whole) in enumerate(_random_trace()):
        size = whole + fraction
        restored = t / MIDDLE - rng.random()
        for policy in (fast, reference):
            policy.access(group, t, 1.0, size)
            if i % 997 == 0:  # now and then a group is forgotten, and another one's key restored
                policy.forget(group)
                policy.set_key(-1 - i, restored)
            if i % 4999 == 4998:  # and the real cache changes size (its shadows evict, or start over from 0)
                policy.set_capacity((0.0, 150.0, 400.0, 900.0)[(i // 4999) % 4])
        if i % 2999 == 0:
            assert fast.take_touched() == reference.take_touched()
        if choose_admission and i % 1009 == 0:
            assert fast.before(group) == reference.before(group) and fast.before(-1 - i) == reference.before(-1 - i)
    assert fast.switches >= 5 and fast.sample_rate < 0.5  # the trace exercises switches and halvings
    assert fast.smaller is None and reference.smaller is None  # and the smaller shadows, until they were retired
    # ... and every layout it may choose
    assert {layout for _, _, layout in fast.history} == {LAYOUTS[layout] for layout in reference.layouts}
    assert list(fast.history) == reference.history
    assert list(fast.keys().items()) == list(reference.keys().items())  # the same keys in the same order
    candidates = fast.candidates()
    assert len(candidates) == len(reference.shadows) == len(reference.tables) * len(reference.layouts)
    assert [c.keys for c in candidates[:len(reference.tables)]] == reference.tables  # every key, exactly
    assert fast.sampled() == reference.sampled and fast.sampled_groups == len(reference.sampled)
    assert fast.sample_rate == reference.sample_rate and fast.scores() == reference.choice.quick.totals
    assert [c.layout for c in candidates] == [LAYOUTS[layout] for layout in reference.layouts for _ in reference.tables]
    for mine, theirs in zip(candidates, reference.shadows):
        assert mine.residents == theirs.resident and mine.used == theirs.used and mine.hits == theirs.hits
        assert list(mine.residents) == list(theirs.resident)  # held in the order they came in


def test_the_simulator_replays_the_fast_path_as_the_reference():
    trace = list(_random_trace(20_000, seed=4))
    ids = {group: i for i, group in enumerate(dict.fromkeys(g for g, _, _ in trace))}
    columns = ([t for _, t, _ in trace], [ids[g] for g, _, _ in trace], [int(s) for _, _, s in trace],
               [-1] * len(trace))
    results = []
    for cls in (AdaptiveLRFUPolicy, _Straightforward):
        rating = cls(half_life=MIDDLE, **_options())
        cache = HTDAPolicy(400, rating)
        results.append((cache.replay(*columns), cache.staged, cache.evicted, list(rating.history)))
    assert results[0] == results[1] and results[0][3]


# -- LIRS shadows ------------------------------------------------------------------------------------------------

def lirs_only(capacity: int) -> AdaptiveLRFUPolicy:
    """Plain and LIRS shadows at the short half-life (LRU-like keys), nothing else."""
    return adaptive(start=SHORT, capacity=capacity, half_lives=(SHORT,), choose_admission=False,
                    choose_probation=False, smaller_share=0.0)


def residents(policy: AdaptiveLRFUPolicy, layout: str) -> set:
    return {g for c in policy.candidates() if c.layout == layout for g in c.residents}


def test_a_lirs_shadow_keeps_a_loop_one_group_longer_than_itself_where_lru_keeps_nothing():
    """A loop of 201 groups through a cache of 200: LRU misses every access; LIRS protects 198 and cycles the
    others through its queue of 2, so it hits all but three groups a lap (Jiang and Zhang's case for LIRS).
    The policy lays the cache out as LIRS, as it started."""
    policy = lirs_only(200)
    assert policy.layout == LIRS
    t = 0.0
    for _ in range(20):
        for g in range(201):
            t += 1.0
            policy.access(g, t)
    ratios = policy.shadow_hit_ratios()
    assert ratios[(f"{SHORT:g}", "plain")] == 0.0
    assert ratios[(f"{SHORT:g}", "lirs")] >= 198 / 201 - 0.01
    assert policy.layout == LIRS and policy.switches == 0


def test_a_group_read_again_joins_the_protected_part_and_its_lowest_is_demoted_to_the_queue():
    """100 groups of 1 in a LIRS shadow of 100: the first 99 fill the protected part, the next ones queue (read
    once).  Group 100, read again after it left, beats the protected part's lowest (group 1: group 0 was read
    again): it joins, group 1 is demoted to the queue (still held), and room is made from the queue's head
    (group 101).  A new group then pushes group 1 out."""
    policy = lirs_only(100)
    t = 0.0
    for g in [*range(102), 0, 100]:
        t += 1.0
        policy.access(g, t)
    held = residents(policy, "lirs")
    assert held == set(range(101)) - {99}
    policy.access(102, t + 1.0)
    assert residents(policy, "lirs") == held - {1} | {102}


def test_a_queued_group_read_again_but_older_than_the_protected_part_goes_to_the_queues_tail():
    """A group read again while queued joins the protected part only if its key before beats the lowest there;
    else it starts again at the queue's tail (its old place is skipped, lazily), so the other queued group leaves
    first."""
    policy = lirs_only(200)
    t = 0.0
    for g in [*range(200), *range(198)]:  # 0-197 protected and read again; 198 and 199 queued
        t += 1.0
        policy.access(g, t)
    policy.access(198, t + 1.0)  # its key before (its first read) is below every protected group's
    policy.access(1000, t + 2.0)  # a new group: the queue's head goes, 199 and not 198
    assert residents(policy, "lirs") == set(range(199)) | {1000}

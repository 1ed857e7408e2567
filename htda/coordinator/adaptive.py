"""``lrfu-adaptive``: LRFU whose half-life follows the workload, chosen online by shadow caches.

No fixed half-life wins everywhere (``docs/simulator.rst``): a short one
(LRU-like) wins where the working set drifts, a long one (LFU-like) where a
stable popular set is read among scans.  This policy keeps the LRFU key of
every group at each of a few candidate half-lives (:data:`DEFAULT_HALF_LIVES`)
and ranks with the one that is currently best:

- **keys at every half-life**: LRFU keys are log-scaled sums
  (:mod:`.rating`), so an access updates each candidate's key of the group in
  O(1); the *active* candidate's keys are the policy's keys
  (:meth:`~.rating.RatingPolicy.keys`), the others wait in their own tables;
- **shadow caches** (miniature simulations, as in SHARDS: C. Waldspurger et
  al., *Efficient MRC Construction with SHARDS*, FAST'15, and *Cache
  Modeling and Optimization using Miniature Simulations*, ATC'17): the groups
  whose mixed hash falls below a *rate* of the hash space are replayed
  through one small cache per candidate, of *rate* times the real cache's
  size (:meth:`set_capacity`), evicting the lowest key of that candidate;
  each counts the bytes it would have hit.  The rate starts at
  ``sample_rate`` and halves whenever more than ``max_sampled`` groups are
  sampled (SHARDS' fixed-size variant, by halving): a workload of few large
  groups is replayed whole, one of millions of small ones by a sample of
  bounded cost.  Which groups a sample holds depends on their hashes, and
  ``sample_seed`` picks another sample (:func:`sample_salt`): on a trace
  with more groups than ``max_sampled`` the choices, and the cache's hits,
  differ from one sample to another, and the simulator's ``--sample-seed``
  shows by how much (``docs/simulator.rst``, *How much a sample changes*);
- **admission shadows** (``choose_admission``, on by default): a second shadow
  per candidate asks, before a missed group displaces anything, TinyLFU's
  question (:mod:`.admission`) of the LRFU keys themselves: is the group's key
  *before this access* above the key of each victim it would displace (a group
  read once has none, so it never displaces one read before)?  The keys before
  the latest access are kept beside the keys (:meth:`before`).  When such a
  shadow wins, :attr:`admitting` is true and the cache around the rating asks
  the question too (the simulator's cache, the coordinator's placement): on
  traces full of blocks read once (CloudPhysics) that keeps the cache for the
  blocks read again, where on others (OLTP) it only delays them, and the
  shadows tell which.  Without LIRS shadows (below) the policy starts asking (``start_admitting``): where
  asking is wrong the shadows show it at once (every group read again misses
  once more), where it is right they show it only when a scan or a loop
  larger than the cache comes back to what asking kept, too late for a cache
  that did not ask (over fourteen public traces: a mean of 0.002 below the
  best baseline starting to ask, 0.006 starting not to; the worst cell 0.03
  below it against 0.08; ``docs/simulator-history.rst``);
- **probation shadows** (``choose_probation``, on by default): a third shadow
  per candidate lays its cache out as S3-FIFO does (Yang et al., *FIFO
  queues are all you need for cache eviction*, SOSP'23) in front of the
  candidate's lowest-key order: a missed group enters a FIFO queue of
  :data:`PROBATION_SHARE` of the capacity and leaves it for the main part only
  if it was read again while queued, else it goes, remembered in a ghost list
  (as many bytes as the main part) from which a group read again goes straight
  to the main part.  Groups read once pass through without displacing what
  is read often, and those read again soon are still hit, which the
  admission question does not allow (it keeps a group out until its second
  read).  When such a shadow wins, :attr:`probation` is true and the cache
  around the rating does the same (the simulator's cache as described; the
  coordinator's placement places the best groups filling the queue's share
  unasked and the others only once read again).  Where S3-FIFO beat every
  half-life (database objects, web pages, OLTP pages) this is what was
  missing (``docs/simulator-history.rst``, *Probation chosen online*).
  A cache that turns to probation still holds what the layout before
  admitted, and its main part gives room only as fast as groups leave the
  queue read again: in a large cache, the groups read once that it held
  would stay for good (P12 at 50 %: 47 % of the bytes, never read again).
  So once the slow totals too put the active half-life's probation shadow
  first (:attr:`settled`, :meth:`TwoPaceChoice.leads`: strictly, or level
  with the layouts that hit exactly its bytes while the others are behind
  by the margin; never while its own shadows are level), the cache puts
  those groups on probation as well, lowest key first (``_replay.c``);
  before that, a turn to probation on a few rounds' evidence flushes
  nothing (CloudPhysics at 50 %: 0.333 settling at once, 0.402 waiting;
  there the question is behind by less than the margin, and pays when a
  scan comes back).  Level counts: on web07 at 50 % the plain and
  probation shadows hit the same bytes throughout, and a cache that turned
  to probation but never settled gave 0.6949 where either layout alone
  gives 0.6985 (0.6972 settling; ``docs/simulator-history.rst``,
  *Settling on probation*, *Level, and leads that last*).  The
  coordinator's placement has no such part: it places by score, and a
  better group displaces what is placed;
- **LIRS shadows** (``choose_lirs``, on by default): a fourth shadow per
  candidate lays its cache out as LIRS does (Jiang and Zhang, *LIRS: an
  efficient low inter-reference recency set replacement policy*,
  SIGMETRICS'02) over the candidate's keys: its main part, at most
  1 - :data:`LIRS_SHARE` (99 %) of the capacity, is LIRS's protected set,
  lowest key out; a FIFO queue holds the other resident groups.  A missed
  group joins the main part while it has room, or if its key before this
  access beats the main part's lowest (at a short half-life: it was read
  again while more recent than the oldest protected group, LIRS's test that
  it is still in the stack, with no stack kept); else it is queued.  A
  queued group read again is tested again: it joins the main part, or goes
  to the queue's tail.  The main part's lowest then go to the queue's tail,
  and room is made from the queue's head.  A loop one group longer than the
  cache, which LRU misses entirely, is hit but for a few groups a lap: on
  LIRS's own loop traces (cs, ps, multi1-3) no choice among the other
  layouts came near W-TinyLFU.  The policy starts with this layout
  (``start_admitting``) and holds it as it holds the question (``held`` of
  :class:`TwoPaceChoice`): like the question, its test keeps a scan or a
  loop out of what it protects, and pays late.  When such a shadow wins
  (:attr:`layout` is LIRS) the cache around the rating does the same (the
  simulator's cache as described; the coordinator's placement places the
  best groups filling :data:`LIRS_SHARE` unasked and past them only groups
  whose key before their latest access beats the lowest placed).  Over five
  samples of the groups of 23 public traces it closes 3.5 % of the gap to
  PFOO-L on average against 2.5 % without it, in every sample more, with
  about as many cells at or above the best baseline (62.6 of 115 on average
  against 62.8) but fewer in every sample (55 against 57), and replays
  about a quarter slower (``docs/simulator-history.rst``, *LIRS as a fourth
  layout*);
- **smaller shadows** (``smaller_share``, :data:`SMALLER_SHARE` of the size): until the cache first fills,
  its shadows have evicted nothing, so all of them have hit the same bytes and the choice has nothing to go
  by; for a large cache that is a fifth to two fifths of a trace, and the layout it fills with (the start)
  decides what it holds long after.  Four more shadows, one per layout at the starting half-life and an
  eighth of the size, fill eight times sooner; their hits go to a layout choice of their own
  (:class:`DampedChoice`, the quick pace), and while the cache's own shadows have all hit alike its layout
  is the one they pick (no switch is counted: nothing tells its own shadows apart).  Once its own shadows
  differ they decide, and the smaller ones are retired (:meth:`~._adaptive.Kernel._retire`: emptied, never
  replayed again).  Over twelve public traces: 33 cells at or above the best baseline, as before, with a
  mean difference of +0.0034 instead of +0.0031; over nine more not looked at before: 23 of 45 instead of 15
  (``docs/simulator-history.rst``, *Smaller shadows first*);
- **decisions** (:class:`TwoPaceChoice`), at two paces, because the two kinds
  of switch cost the cache differently.  At the end of every *round* the hit
  counts of the round are added to decayed totals.  A round lasts about one
  turnover of the shadow caches (:func:`round_length`): as many sampled
  accesses as they hold groups of the round's mean size, at least
  :data:`SHORTEST_ROUND` and at most ``decision_every`` (1,000): a small
  cache's shadows show which wins long before 1,000 accesses, and rounds
  much longer than their turnover average the phases away (over twelve
  public traces: 33 cells at or above the best baseline instead of 32, and
  on three held out the worst cell 0.0046 below it instead of 0.0085;
  ``docs/simulator-history.rst``, *Rounds as long as a turnover*):

  - **the layout** of the active half-life follows its shadows quickly
    (:class:`DampedChoice`, totals decayed by ``decay`` a round): one of them
    replaces the active layout only if its total beats the active one's by
    more than ``hysteresis`` times the smaller of the active one's hits and
    misses (so a small relative gain counts when the active one misses little,
    as in a large cache), in ``patience`` decisions in a row, so that the
    choice does not flap on noise; one that beats it by more than
    ``decisive`` times that (ten times the margin) replaces it at once: strong
    evidence is acted on in one round.  A change of layout re-sorts nothing.
    The benefits of the layouts do not show at the same pace: the admission
    question costs at once (every group read again misses once more) and pays
    late (a scan or a loop larger than the cache flushes the groups it kept
    only when it has gone past them), so waiting ``patience`` rounds when an
    admission shadow wins clearly lets the scan evict what the shadow kept
    (CloudPhysics at 20 %: 0.108 waiting, 0.164 switching at once;
    ``docs/simulator-history.rst``).  For the same reason one round is not evidence
    enough *against* the question: a scan read again at once is a round in
    which every shadow that admitted it hits far more, though over the
    following rounds the question wins.  So the question's layout is left at
    once only if the slow totals (below) agree, and otherwise only after
    ``patience`` rounds (``held`` of :class:`TwoPaceChoice`; CloudPhysics at
    20 %: 0.173 leaving it on such a round, 0.221 holding it; over all 23
    public traces 62 of 115 cells at or above the best baseline instead of
    60, no cell lower by more than 0.002; ``docs/simulator-history.rst``, *Holding
    the question*);
  - **the half-life** follows slowly: each half-life is scored by its best
    layout's totals decayed by ``half_life_decay`` a round (0.9: about ten
    rounds), and another replaces the active one, with that best layout, once
    it beats the active half-life's by the same margin.  A switch of
    half-life re-sorts the whole cache and flushes what the old order kept;
    the rounds in which a shorter half-life wins are often single rounds,
    over before any quick rule could confirm them, so following them costs
    the rounds after (P12 at 10 %: 0.4824 following them, 0.5043 at this
    pace; over twelve public traces the mean difference to the best baseline
    went from +0.0010 to +0.0029; ``docs/simulator-history.rst``, *Two paces*);
  - **a lead that lasts** (:class:`LastingLeads`): the margin is a share of
    the misses, so a small lead never passes it however long it lasts (on
    scarab at 10 % the 1-day plain shadow hit 0.55 % more bytes than the
    1-day probation one over 162 rounds, where the margin asks about 3 %: the
    cache stayed on probation for the last 133, 0.6228, where plain alone
    gives 0.6284).  So each layout's round-by-round difference to each
    other one at the same half-life is also kept over a long memory
    (``lasting_decay``, 0.99: about a hundred rounds), and one whose mean
    lead is ``lasting_z`` (2) standard errors replaces the active layout,
    after at least :data:`LASTING_ROUNDS` rounds, if the quick and the slow
    totals have it ahead too (scarab at 10 %: 0.6278).  A lead that changes
    sides does not add up, and one that lasted but is over does not count:
    the margin is waived, not the direction of the evidence (without that,
    P3 at 20 % fell by 0.010-0.015 in two samples of five, switching to
    probation on a lead long gone).

Time is only ever the accesses' own timestamps (the keys); decisions count
accesses, never seconds, so a replay gives the same choices whatever the
clock.  When the active half-life changes every key changes (all groups are
*touched*, :meth:`~.rating.RatingPolicy.take_touched`) and ``on_switch``, if
set, is called: a cache ordered by the old keys re-sorts itself.

The per-access work is C (``_adaptive.c``, the base class
:class:`~._adaptive.Kernel`, built by ``setup.py``): every group has a row of
keys (one a candidate), the active ones are also in :meth:`keys` (a dict, as
for every rating, whose floats the kernel updates in place while nobody else
holds them: an access allocates nothing there; the simulator turns that dict off, ``mirror_keys``, and reads
the kernel's table); each shadow is a binary heap of (key when pushed, group)
over the sampled groups' indices, lazy as keys only grow (an entry whose key
went stale is re-pushed when it reaches the top), so it evicts exactly the
least (key, group), ties broken as Python compares tuples.  The keys, the
shadows and so the decisions are bit for bit those of the straightforward
Python that ``tests/coordinator/test_adaptive.py`` keeps as a reference:
the same operations in the same order, no fused multiply-add.

Without :meth:`set_capacity` (or with 0) there are no shadow caches and the
policy is plain LRFU at ``half_life``.  Sizes are whatever unit the capacity
is in: bytes in the simulator; the coordinator, which records accesses
without sizes, counts groups (size 1 each) against its number of placed
groups.

:meth:`AdaptiveLRFUPolicy.candidates` shows each candidate as the policy sees
it (its keys, its shadow cache, its hits), a copy for reading: the tests and
an operator's investigation read the policy through it, never through its
tables.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ..kernels import not_built
from .rating import NEVER, G, RatingPolicy, log_add

try:
    from ._adaptive import Kernel
except ImportError as exc:
    raise not_built(exc) from exc

__all__ = ["AdaptiveLRFUPolicy", "Candidate", "DEFAULT_HALF_LIVES", "DampedChoice", "LastingLeads", "TwoPaceChoice",
           "LAYOUTS", "LASTING_ROUNDS", "LIRS", "LIRS_SHARE", "PLAIN", "ASKING", "PROBATION", "PROBATION_SHARE",
           "SHORTEST_ROUND", "SMALLER_SHARE", "placement_admission", "round_length", "sample_salt"]

#: candidate half-lives: 5 minutes, 1 hour, 1 day, 7 days, 30 days.  30 days (nearly LFU) was added in the
#: thirteenth session: over 23 public traces it lifted a cell above the best baseline and dropped none, and the
#: synthetic analysis workload is unchanged; 1 minute beside it lifted one more but lost the synthetic workload at
#: 0.25-2 % of its footprint (docs/simulator-history.rst, *The candidates' range widened*)
DEFAULT_HALF_LIVES = (300.0, 3600.0, 86400.0, 604800.0, 2592000.0)

#: the layouts of a cache the shadows replay (the kernels' HTDA_PLAIN, HTDA_ASKING, HTDA_PROBATION, HTDA_LIRS):
#: every group admitted, lowest key out (PLAIN); the admission question asked first (ASKING); new groups on
#: probation in a FIFO queue (PROBATION); a protected part joined only by groups read again soon enough (LIRS)
PLAIN, ASKING, PROBATION, LIRS = 0, 1, 2, 3
LAYOUTS = ("plain", "asking", "probation", "lirs")
#: the fewest sampled accesses in a round, however small the shadow caches (see :func:`round_length`)
SHORTEST_ROUND = 100
#: the fewest rounds (decayed) before a lasting lead may replace the active layout (:class:`LastingLeads`)
LASTING_ROUNDS = 10
#: the size of the smaller shadows, as a share of the others' (see the module docstring): any share from 1/16 to 1/4
#: put 33-34 of twelve public traces' 60 cells and 20-24 of nine more's 45 at or above the best baseline; from 0.35
#: on, the smaller shadows left the admission question before a scan came back (CloudPhysics at 50 %: 0.076 lost);
#: 1/8 is the middle of that plateau
SMALLER_SHARE = 0.125
#: the share of the cache a probation queue may fill (S3-FIFO's small queue); the kernels' HTDA_PROBATION_SHARE
#: (_adaptive_api.h) is the same number: their tests against the Python references, which use this one, fail
#: if they differ
PROBATION_SHARE = 0.1
#: the share of the cache a LIRS layout's queue of unprotected groups may fill (LIRS's HIR share, as its authors
#: advise); the kernels' HTDA_LIRS_SHARE is the same number, checked as PROBATION_SHARE is
LIRS_SHARE = 0.01


def sample_salt(seed: int) -> int:
    """What ``sample_seed`` xors into every group's hash before it is mixed: 0 for seed 0 (the default sample), and
    for each other seed a different 64-bit number, so another set of groups falls below the sampling threshold."""
    return (seed * 0xD1B54A32D192ED03) & 0xFFFFFFFFFFFFFFFF


def round_length(longest: int, shadow_capacity: float, accesses: int, requested: float) -> int:
    """How many sampled accesses the next round lasts: about one turnover of the shadow caches, as many accesses as
    they hold groups of the round's mean size (``requested`` bytes over ``accesses``), at least
    :data:`SHORTEST_ROUND` and at most ``longest``.  A round much longer than the turnover of a small cache
    averages its phases away (and a short trace ends before the choice has seen a few rounds); one much shorter
    than a large cache's turnover judges it before its choices show."""
    if requested <= 0 or accesses <= 0:
        return longest
    return min(longest, max(SHORTEST_ROUND, int(shadow_capacity * accesses / requested)))


class DampedChoice:
    """Which candidate ranks, from rounds of the candidates' shadow hits: decayed totals, a margin, patience (see
    the module docstring).  ``totals`` are each candidate's decayed hits, ``requested`` the decayed bytes
    asked for (each candidate's hits plus misses), ``challenger`` the candidate that won the latest rounds
    (-1: none) and ``wins`` how many rounds in a row it won."""

    def __init__(self, candidates: int, hysteresis: float = 0.05, patience: int = 2, decay: float = 0.5,
                 decisive: float = 0.5):
        self.hysteresis, self.patience, self.decay, self.decisive = hysteresis, patience, decay, decisive
        self.totals = [0.0] * candidates
        self.requested = 0.0
        self.challenger = -1
        self.wins = 0
        #: whether the latest switch :meth:`verdict` gave was decisive (one round, before ``patience`` of them)
        self.at_once = False

    def round(self, hits: Sequence[float], requested: float, active: int) -> int | None:
        """Take one round: each candidate's bytes hit and the bytes asked for, while ``active`` ranks.  The
        candidate to switch to, once one beat ``active`` by the margin in ``patience`` rounds in a row, or by the
        ``decisive`` margin in this one; else None."""
        self.add(hits, requested)
        return self.verdict(active)

    def add(self, hits: Sequence[float], requested: float) -> None:
        """Add one round to the decayed totals."""
        decay = self.decay
        self.totals = [decay * total + hit for total, hit in zip(self.totals, hits)]
        self.requested = decay * self.requested + requested

    def verdict(self, active: int, among: Sequence[int] | None = None) -> int | None:
        """The candidate (of ``among``, default all) to switch to from ``active`` after the latest :meth:`add`, as
        :meth:`round` says; else None."""
        totals = self.totals
        best = max(range(len(totals)) if among is None else among, key=totals.__getitem__)
        mine = totals[active]
        gain, scale = totals[best] - mine, min(mine, self.requested - mine)
        if best == active or gain <= self.hysteresis * scale:
            self.challenger, self.wins = -1, 0
            return None
        self.wins = self.wins + 1 if best == self.challenger else 1
        self.challenger = best
        at_once = self.wins < self.patience
        if at_once and gain <= self.decisive * scale:
            return None
        self.challenger, self.wins = -1, 0
        self.at_once = at_once
        return best


class LastingLeads:
    """How surely each layout of each candidate half-life beats each other one over many rounds: a decayed count of
    rounds and, per candidate and pair of layouts i < j, decayed sums of the round's difference of hits (j's minus
    i's, over the bytes asked for) and of its square (j against i is the same, negated).  :meth:`z` is the mean
    difference in standard errors: a small lead that lasts grows with the rounds, where one that comes and goes
    does not."""

    def __init__(self, candidates: int, layouts: int, decay: float):
        self.candidates, self.layouts, self.decay = candidates, layouts, decay
        self.rounds = 0.0
        self._sums = [[0.0] * (layouts * layouts) for _ in range(candidates)]  # at i * layouts + j, for i < j
        self._squares = [[0.0] * (layouts * layouts) for _ in range(candidates)]
        # per candidate c and pair i < j: where the two shadows' hits are, and where the pair's sums are
        self._pairs = [[(c + candidates * i, c + candidates * j, i * layouts + j)
                        for i in range(layouts) for j in range(i + 1, layouts)] for c in range(candidates)]

    def add(self, hits: Sequence[float], requested: float) -> None:
        """Add one round: each shadow's hits (a block of ``candidates`` per layout) and the bytes asked for."""
        if requested <= 0:
            return
        decay = self.decay
        self.rounds = decay * self.rounds + 1.0
        for sums, squares, pairs in zip(self._sums, self._squares, self._pairs):  # (once a round: kept lean)
            for low, high, k in pairs:
                d = (hits[high] - hits[low]) / requested
                sums[k] = decay * sums[k] + d
                squares[k] = decay * squares[k] + d * d

    def z(self, candidate: int, layout: int, other: int) -> float:
        """By how many standard errors ``other`` has beaten ``layout`` at ``candidate``'s half-life, per round."""
        n = self.rounds
        if not n or layout == other:
            return 0.0
        low, high = min(layout, other), max(layout, other)
        k = low * self.layouts + high
        mean = self._sums[candidate][k] / n
        variance = max(self._squares[candidate][k] / n - mean * mean, 1e-18)
        z = mean / math.sqrt(variance / n)
        return z if layout == low else -z


class TwoPaceChoice:
    """The shadow that ranks, as (candidate half-life, layout): the half-life at a slow pace, the layout at a quick
    one (see the module docstring).  ``quick`` is the :class:`DampedChoice` of every shadow (a block of
    ``candidates`` per layout), whose rule picks the layout among the active half-life's shadows; ``slow`` is
    another over the same shadows, its totals decayed by ``half_life_decay`` a round, which switches at once
    (patience 1) among each half-life's best shadow.  The ``held``-th layout (the admission question's, if any)
    is left at once, in one decisive round, only if the slow totals agree: it pays late, so one round against it
    is not evidence enough (see the module docstring).  ``lasting`` (:class:`LastingLeads`, decayed by
    ``lasting_decay`` a round) lets a layout whose lead is too small for the margin replace the active one once
    it has lasted ``lasting_z`` standard errors (0: never), after at least :data:`LASTING_ROUNDS` rounds, if
    it is ahead in the quick and the slow totals too."""

    def __init__(self, candidates: int, layouts: int, hysteresis: float = 0.05, patience: int = 2,
                 decay: float = 0.5, decisive: float = 0.5, half_life_decay: float = 0.9, held: int | None = None,
                 lasting_decay: float = 0.99, lasting_z: float = 2.0):
        self.candidates, self.layouts, self.held = candidates, layouts, held
        #: each candidate's shadows, one per layout: its block of the totals
        self.blocks = [tuple(c + candidates * lay for lay in range(layouts)) for c in range(candidates)]
        self.quick = DampedChoice(candidates * layouts, hysteresis, patience, decay, decisive)
        self.slow = DampedChoice(candidates * layouts, hysteresis, 1, half_life_decay, decisive)
        self.lasting = LastingLeads(candidates, layouts, lasting_decay)
        self.lasting_z = lasting_z

    def round(self, hits: Sequence[float], requested: float, candidate: int, layout: int) -> tuple[int, int] | None:
        """Take one round (each shadow's bytes hit, the bytes asked for) while ``candidate`` ranks laid out as the
        ``layout``-th layout.  The (candidate, layout) to switch to, else None: another half-life once its best
        layout's slow total beats the active half-life's best by the margin, with that layout; else another
        layout of the active half-life as :class:`DampedChoice` picks it among them."""
        quick, slow, nc = self.quick, self.slow, self.candidates
        quick.add(hits, requested)
        slow.add(hits, requested)
        self.lasting.add(hits, requested)
        totals = slow.totals
        leads = [max(block, key=totals.__getitem__) for block in self.blocks]
        to = slow.verdict(leads[candidate], leads)
        if to is not None:
            quick.challenger, quick.wins = -1, 0
            return to % nc, to // nc
        mine = candidate + nc * layout
        to = quick.verdict(mine, self.blocks[candidate])
        if to is None:
            lasting = self._lasting_lead(candidate, layout)
            if lasting is None:
                return None
            challenger = candidate + nc * lasting
            if quick.totals[challenger] <= quick.totals[mine] or totals[challenger] <= totals[mine]:
                return None  # the margin is waived for a lead that lasts, not the direction of the evidence
            quick.challenger, quick.wins = -1, 0
            return candidate, lasting
        if layout == self.held and quick.at_once and totals[to] <= totals[mine]:
            return None
        return candidate, to // nc

    def leads(self, candidate: int, layout: int, level: bool) -> bool:
        """Whether the slow totals put ``layout`` first among ``candidate``'s layouts: strictly, or (unless the
        shadows are ``level``: they all tie, nothing has shown) level with each other layout that is not behind it
        by the margin.  (A cache settles on probation when its layout leads: see the module docstring.)  A layout
        level with it hit exactly its bytes, so it loses nothing against that one; one behind it, but within the
        margin, may still pay late (the question does, when a scan comes back)."""
        nc, slow = self.candidates, self.slow
        mine = [slow.totals[candidate + nc * i] for i in range(self.layouts)]
        first = mine.pop(layout)
        if all(first > total for total in mine):
            return True
        margin = slow.hysteresis * min(first, slow.requested - first)
        return not level and all(total == first or first - total > margin for total in mine)

    def _lasting_lead(self, candidate: int, layout: int) -> int | None:
        """The layout of ``candidate`` that has beaten ``layout`` by the most standard errors, if by more than
        ``lasting_z`` after at least :data:`LASTING_ROUNDS` rounds; else None."""
        if not self.lasting_z or self.lasting.rounds <= LASTING_ROUNDS:
            return None
        best, most = None, self.lasting_z
        for other in range(self.layouts):
            z = self.lasting.z(candidate, layout, other)
            if z > most:
                best, most = other, z
        return best


@dataclass(frozen=True)
class Candidate:
    """One candidate half-life as :meth:`AdaptiveLRFUPolicy.candidates` shows it: copies, for reading."""

    half_life: float
    #: how this shadow lays its cache out (one of :data:`LAYOUTS`: :attr:`AdaptiveLRFUPolicy.layout`)
    layout: str
    #: whether the policy ranks (and lays the cache out) as it now
    active: bool
    #: every group's key at this half-life
    keys: dict[Any, float]
    #: the groups its shadow cache holds (queued ones too), with their sizes, and their total size
    residents: dict[Any, float]
    used: float
    #: bytes its shadow cache hit in the current round, and its decayed hits of past rounds (its score)
    hits: float
    total: float


class AdaptiveLRFUPolicy(Kernel, RatingPolicy[G]):
    """LRFU at the candidate half-life whose shadow cache hits most lately (see the module docstring).

    The keys and the shadow caches live in the C base :class:`~._adaptive.Kernel`, which records an access in
    one call (:meth:`access`) and calls :meth:`_decide` at the end of every round; this class holds the policy
    around it: configuration, decisions, switches."""

    name = "lrfu-adaptive"

    def __init__(self, half_life: float = 86400.0, epoch: float = 0.0,
                 half_lives: Sequence[float] = DEFAULT_HALF_LIVES, sample_rate: float = 1.0,
                 max_sampled: int = 16384, capacity: float = 0.0, decision_every: int = 1000,
                 hysteresis: float = 0.05, patience: int = 2, decay: float = 0.5, choose_admission: bool = True,
                 decisive: float = 0.5, start_admitting: bool = True, choose_probation: bool = True,
                 half_life_decay: float = 0.9, smaller_share: float = SMALLER_SHARE, sample_seed: int = 0,
                 lasting_decay: float = 0.99, lasting_z: float = 2.0, choose_lirs: bool = True):
        super().__init__(half_life, epoch)
        candidates = sorted({float(h) for h in half_lives} | {self.half_life})
        for wrong, message in (
                (any(not h > 0 for h in candidates), "half_lives must be > 0 seconds"),
                (not 0.0 < sample_rate <= 1.0, "sample_rate must be in (0, 1]"),
                (min(decision_every, patience, max_sampled) < 1,
                 "decision_every, patience and max_sampled must be >= 1"),
                (min(hysteresis, decisive, lasting_z) < 0 or not 0.0 <= decay < 1.0
                 or not 0.0 <= half_life_decay < 1.0 or not 0.0 <= lasting_decay < 1.0,
                 "hysteresis, decisive and lasting_z must be >= 0, decay, half_life_decay and lasting_decay in [0, 1)"),
                (not 0.0 <= smaller_share < 1.0, "smaller_share must be in [0, 1)"),
                (not isinstance(sample_seed, int) or sample_seed < 0, "sample_seed must be an integer >= 0")):
            if wrong:
                raise ValueError(message)
        self.half_lives = candidates
        # one key per group and candidate; the active one's are also self._keys (the same dict object for ever:
        # a reader may hold it, as the simulator does)
        #: the layouts the shadows replay, in the order of their blocks of shadows (PLAIN first)
        self.layouts = (PLAIN,) + ((ASKING,) if choose_admission else ()) + ((PROBATION,) if choose_probation else ()) \
            + ((LIRS,) if choose_lirs else ())
        # smaller shadows only where there is a layout to choose
        smaller_share = float(smaller_share) if len(self.layouts) > 1 else 0.0
        self._configure([1.0 / h for h in candidates], candidates.index(self.half_life), self.layouts, smaller_share)
        #: how the cache around the rating should lay itself out now (PLAIN, ASKING, PROBATION or LIRS): as the
        #: winning shadow does, or as at the start (``start_admitting``: LIRS, or ASKING without it) while none has
        #: won; PLAIN without shadows
        self.layout = PLAIN
        #: on probation, whether the slow totals put the active half-life's probation shadow first too: the cache
        #: then puts on probation the groups read once that it holds (see the module docstring)
        self.settled = False
        # the layout whose shadows ask before a group displaces what they hold, held when one round goes against it
        # (TwoPaceChoice's held) and the cache's start (start_admitting): LIRS's where it is a choice (its test
        # keeps a loop larger than the cache, as the question does, and lets a group read again soon in), else
        # the question's
        question = LIRS if choose_lirs else ASKING if choose_admission else None
        self._start_layout = question if question is not None and start_admitting else PLAIN
        self.sample_rate = sample_rate
        self._sample_salt = sample_salt(sample_seed)
        self._threshold = int(sample_rate * (1 << 64))  # sampled: the group's mixed hash is below this
        self.max_sampled = max_sampled
        #: the longest round, in sampled accesses; :attr:`decision_every`, the current round's length, is shorter
        #: while the shadow caches hold fewer groups (:func:`round_length`)
        self.longest_round = self.decision_every = decision_every
        # the decisions, from every shadow's hits; their quick totals: scores()
        self.choice = TwoPaceChoice(len(candidates), len(self.layouts), hysteresis, patience, decay, decisive,
                                    half_life_decay, None if question is None else self.layouts.index(question),
                                    lasting_decay, lasting_z)
        #: the layout choice among the smaller shadows (one per layout, at the starting half-life), and the index
        #: of the layout it picks, while they are replayed (None once retired, or with no smaller shadows)
        self.smaller: DampedChoice | None = None
        if smaller_share:
            self.smaller = DampedChoice(len(self.layouts), hysteresis, patience, decay, decisive)
        self.smaller_pick = self.layouts.index(self._start_layout)
        self.switches = 0
        # the latest switches: (time, new half-life, new layout's name)
        self.history: deque[tuple[float, float, str]] = deque(maxlen=100)
        self.on_switch: Callable[[], None] | None = None
        self._fixed = False
        # a half-life switch re-rated every group since the last take_touched: they are all touched, a set made
        # when asked for (a switch can come every few thousand accesses, and a set of every group each time was
        # a tenth of a small cache's replay)
        self._touched_all = False
        self.set_capacity(capacity)

    @classmethod
    def fixed(cls, half_life: float, layout: int, epoch: float = 0.0) -> AdaptiveLRFUPolicy[Any]:
        """One of the candidates alone: LRFU at ``half_life``, the cache laid out as ``layout`` says from the start,
        never switching.  The simulator replays each (``htda simulate --hindsight``) to show what the online
        choice among them gives up against the best of them in hindsight."""
        if layout not in (PLAIN, ASKING, PROBATION, LIRS):
            raise ValueError(f"layout must be one of {PLAIN}, {ASKING}, {PROBATION}, {LIRS} ({', '.join(LAYOUTS)})")
        policy: AdaptiveLRFUPolicy[Any] = cls(half_life=half_life, epoch=epoch, half_lives=[half_life],
                                              choose_admission=layout == ASKING, choose_probation=layout == PROBATION,
                                              smaller_share=0.0, choose_lirs=layout == LIRS)
        policy._fixed = True
        policy._start_layout = layout
        return policy

    @property
    def admitting(self) -> bool:
        """Whether the cache should ask the admission question now (see :meth:`before`)."""
        return self.layout == ASKING

    @property
    def probation(self) -> bool:
        """Whether the cache should put new groups on probation now: a FIFO queue of :data:`PROBATION_SHARE` of
        its size, which a group leaves for the rest of the cache only if it was read again while queued, and a
        ghost list of the groups that left it unread (as many bytes as the rest), which go straight to the rest
        when read again (S3-FIFO's quick demotion)."""
        return self.layout == PROBATION

    # -- configuration ------------------------------------------------------
    def set_capacity(self, capacity: float) -> None:
        """The real cache's size (bytes, or groups when accesses carry no size): the shadows get ``sample_rate``
        of it.  0 turns the adaptation off (plain LRFU, laid out PLAIN); from 0 the shadows start empty and the
        layout is the starting one (``start_admitting``)."""
        if capacity < 0:
            raise ValueError("capacity must be >= 0")
        if not capacity:
            self.layout = PLAIN
        elif not self.capacity:
            self.layout = self._start_layout
        self.capacity = float(capacity)
        self._shadow_capacity = self.sample_rate * self.capacity
        self._evict(self._shadow_capacity)

    def reserve(self, groups: int) -> None:
        """Make room for ``groups`` groups at the start (a hint, from a caller that knows how many groups are coming:
        the simulator does; the tables then do not grow, copying every group's slot each time)."""
        if groups < 0:
            raise ValueError("groups must be >= 0")
        self._reserve(groups)

    # -- updating -------------------------------------------------------------
    def _key_after(self, key: float, t: float, weight: float) -> float:  # the active candidate's rule
        return log_add(key, math.log2(weight) + (t - self.epoch) / self.half_life)

    def offset(self, now: float) -> float:
        return (now - self.epoch) / self.half_life

    # access(group, t, weight=1.0, size=1.0) is the kernel's: every candidate's key, then the sampled replay

    def set_key(self, group: G, key: float) -> None:
        """Restore the active key of ``group``; the other candidates get the key of the same score at the latest
        access time seen (an approximation: the history behind the key is gone)."""
        key = float(key)
        active_h = self.half_life
        ref = self._now - self.epoch
        self._set_keys(group, [key if i == self.active else NEVER if key == NEVER else key - ref / active_h + ref / h
                               for i, h in enumerate(self.half_lives)])

    def forget(self, group: G) -> None:
        self._forget(group)

    def take_touched(self) -> set[G]:
        touched = super().take_touched()
        if self._touched_all:
            self._touched_all = False
            return set(self.keys())  # (the groups touched since are among them, those forgotten are not)
        return touched

    def clear_touched(self) -> None:
        self._touched_all = False
        super().clear_touched()

    # -- reading --------------------------------------------------------------
    # key(group) is the kernel's, from its table.  The rest reads _keys, the dict that mirrors the active keys,
    # unless ``mirror_keys`` is off (the kernel's attribute): the simulator's compiled cache reads every key from
    # the kernel, and the dict, a float written an access and every group's at each switch of half-life, was a
    # fifth to two fifths of a small cache's replay with many switches (P6 at 1 %) and 73 bytes a group.
    def keys(self) -> dict[G, float]:
        """All keys at the active half-life: the dict the kernel keeps them in (read-only), or a new one made from
        its table when ``mirror_keys`` is off."""
        return self._keys if self.mirror_keys else self.table(self.active)

    def __len__(self) -> int:
        return len(self._keys) if self.mirror_keys else self.groups

    def __contains__(self, group: object) -> bool:
        return group in self._keys if self.mirror_keys else self._knows(group)

    # -- choosing -------------------------------------------------------------
    def scores(self) -> list[float]:
        """Each shadow's decayed hits (the last decision's totals): a block of the candidates in order per layout
        of :attr:`layouts` (plain, then asking and on probation when chosen)."""
        return list(self.choice.quick.totals)

    def _decide(self, hits: Sequence[float]) -> None:
        """The end of a round (the kernel calls it): ``hits`` are the bytes each shadow hit in it (the smaller
        shadows' after the others')."""
        accesses, self._sampled = self._sampled, 0
        requested, self._round_bytes = self._round_bytes, 0.0
        self.decision_every = round_length(self.longest_round, self._shadow_capacity, accesses, requested)
        mine = len(self.choice.quick.totals)
        hits, smaller_hits = hits[:mine], hits[mine:]
        level = self.smaller is not None and _alike(hits) and _alike(self.choice.quick.totals)
        if self.smaller is not None:
            pick = self.smaller.round(smaller_hits, requested, self.smaller_pick)
            self.smaller_pick = self.smaller_pick if pick is None else pick
        to = self.choice.round(hits, requested, self.active, self.layouts.index(self.layout))
        if self._fixed:
            return
        if to is not None:
            self._switch(to[0], self.layouts[to[1]])
        self.settled = self.layout == PROBATION and self.choice.leads(self.active, self.layouts.index(PROBATION), level)
        if self.smaller is None:
            return
        if not level:  # the shadows of the cache's own size tell now: the smaller ones have served
            self._retire(mine)
            self.smaller = None
        else:
            # no switch: nothing tells the cache's own shadows apart yet (so the half-life is still the starting
            # one, the smaller shadows'), and it starts from the smaller ones' pick
            self.layout = self.layouts[self.smaller_pick]

    def _switch(self, to: int, layout: int) -> None:
        """Rank with candidate ``to`` and lay the cache out as ``layout`` from now on: a new half-life's keys move
        into the active table (the same dict object) and every group is touched; a change of layout alone re-keys
        nothing."""
        self.switches += 1
        self.layout = layout
        rekeyed = to != self.active
        if rekeyed:
            self._activate(to)
            self.half_life = self.half_lives[to]
            self._touched_all = True
        self.history.append((self._now, self.half_life, LAYOUTS[layout]))
        if rekeyed and self.on_switch is not None:
            self.on_switch()

    # -- reading --------------------------------------------------------------
    def shadow_hit_ratios(self) -> dict[tuple[str, str], float]:
        """Each shadow's score as a share: its decayed hits over the decayed bytes asked for, keyed by (half-life in
        seconds, layout name).  Near-equal shares say the choice is among near-equals (it may switch often for
        little); all 0 before the first round."""
        nc = len(self.half_lives)
        requested = self.choice.quick.requested
        return {(f"{self.half_lives[i % nc]:g}", LAYOUTS[self.layouts[i // nc]]):
                total / requested if requested else 0.0 for i, total in enumerate(self.choice.quick.totals)}

    def candidates(self) -> list[Candidate]:
        """Each candidate half-life, shortest first: its keys, its shadow cache and its hits, copied (every key
        of every group: for tests and investigations, not for a hot path)."""
        shown = []
        nc = len(self.half_lives)
        for i, total in enumerate(self.choice.quick.totals):
            c, layout = i % nc, self.layouts[i // nc]
            residents, used, hits = self.shadow(i)
            shown.append(Candidate(half_life=self.half_lives[c], layout=LAYOUTS[layout],
                                   active=c == self.active and layout == self.layout, keys=self.table(c),
                                   residents=residents, used=used, hits=hits, total=total))
        return shown


def _alike(values: Sequence[float]) -> bool:
    """Whether every value is the same (shadows that hit alike so far: the same accesses, added in the same order)."""
    return all(v == values[0] for v in values)


def placement_admission(policy: AdaptiveLRFUPolicy[Any], group_of: Callable[[Any], Hashable | None]) -> dict[str, Any]:
    """The admission arguments of :func:`~.placement.place` for the layout ``policy`` asks for now, as a
    placement (which has no queue) lays itself out: asking, the question of every group (``group`` displaces the
    placed files ``victims`` only if its key before its latest access beats the key of each of their groups, by
    ``group_of(file)``); on probation, the best groups filling :data:`PROBATION_SHARE` of the space unasked (the
    queue, by score rather than by arrival) and past them only groups read again (with a key before their latest
    access); LIRS, the best groups filling :data:`LIRS_SHARE` unasked (its queue of unprotected groups) and past
    them only groups whose key before their latest access beats the lowest key placed (the first victim: the
    placement displaces the lowest first), LIRS's test that a group read again is still in the stack; plain,
    none.  A group that is not an int (the coordinator's pins) is always admitted."""
    def victim_keys(group: Hashable, victims: list[Any]) -> Iterator[float]:
        return (policy.key(g) for g in map(group_of, victims) if g is not None and g != group)

    if policy.layout == ASKING:
        def better_than_victims(group: Hashable, victims: list[Any]) -> bool:
            if not isinstance(group, int):
                return True
            before = policy.before(group)
            return all(before > key for key in victim_keys(group, victims))
        return {"admit": better_than_victims, "window": 0.0}
    if policy.layout == LIRS:
        def better_than_lowest(group: Hashable, victims: list[Any]) -> bool:
            lowest = min(victim_keys(group, victims), default=None) if isinstance(group, int) else None
            return lowest is None or policy.before(group) > lowest
        return {"admit": better_than_lowest, "window": LIRS_SHARE}
    if policy.layout == PROBATION:
        def read_again(group: Hashable, victims: list[Any]) -> bool:
            return not isinstance(group, int) or policy.before(group) != NEVER
        return {"admit": read_again, "window": PROBATION_SHARE}
    return {}

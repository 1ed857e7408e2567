"""Rating policies: how much a file group is worth caching, from its access history.

Every policy keeps, per group, one number — the *key* — that never changes
unless the group is accessed again, and whose order is the order of the
groups' scores at any time.  The score at time ``now`` is

    score = 2 ** (key - offset(now))

where ``offset`` is the same for every group.  So ranking groups never needs a
rescan of the history: an access updates one key in O(1), and the order of the
keys is the order of the scores whenever they are read.

``lrfu`` (default)
    Each access at time ``t`` with weight ``w`` contributes
    ``w * 2 ** (-(now - t) / half_life)``: its weight halves every half-life.
    The score of a group is the sum over its accesses.  The key is kept in the
    log domain relative to a fixed epoch ``T0``::

        key = log2(sum_i w_i * 2 ** ((t_i - T0) / half_life))
        offset(now) = (now - T0) / half_life

    so no value overflows however long the history (an access adds to the key
    with a log-add, ``log2(2**a + 2**b)``).  A short half-life makes the most
    recent access dominate (LRU-like); a long one makes every access count
    the same (LFU-like).
``lru``
    Only the last access counts: ``score = 2 ** (-(now - t_last) / half_life)``
    (weights are ignored).
``lfu``
    Every access counts forever: ``score = sum_i w_i`` (the half-life is
    ignored).

A file belongs to several groups (the inputs of each job that read it, the
task/cluster of those jobs); it scores the best of its groups
(:func:`best_key`, :func:`file_score`), optionally per unit of size
(:func:`normalised_key`: the value of caching it per GiB transferred).

Policies are plugins: entry points ``lrfu``, ``lru``, ``lfu`` of the group
``htda.policies``; every one is built as ``cls(half_life=..., epoch=...)``.
"""

from __future__ import annotations

import heapq
import math
from abc import ABC, abstractmethod
from collections.abc import Hashable, Iterable
from operator import itemgetter
from typing import Generic, TypeVar

__all__ = [
    "GIB",
    "LFUPolicy",
    "LRFUPolicy",
    "LRUPolicy",
    "RatingPolicy",
    "add_key",
    "best_key",
    "file_score",
    "log_add",
    "normalised_key",
    "score_of",
]

GIB = 1 << 30
NEVER = -math.inf  # key of a group that was never accessed

#: the type of a group's id: the coordinator uses database ids (``int``), the simulator trace ids
G = TypeVar("G", bound=Hashable)


def log_add(a: float, b: float) -> float:
    """``log2(2**a + 2**b)`` without leaving the log domain (no overflow)."""
    if a < b:
        a, b = b, a
    if b == NEVER:
        return a
    return a + math.log2(1.0 + 2.0 ** (b - a))


#: ``1.0 + 2.0 ** d`` rounds to exactly 1.0 for ``d <= -53`` (half an ulp of 1.0, ties to even): there
#: :func:`log_add` adds exactly 0.0 and its result is the larger argument
_NEGLIGIBLE = -53.0


def add_key(keys: dict[G, float], group: G, x: float) -> None:
    """``keys[group] = log_add(keys.get(group, NEVER), x)``, bit for bit: the hot path of every LRFU access (the
    fixed half-life's and each candidate's of ``lrfu-adaptive``), so :func:`log_add` is inlined and its
    exponentials are skipped where they add exactly nothing (:data:`_NEGLIGIBLE`: an access many half-lives
    after the group's previous ones, or before them).  ``x`` is finite."""
    old = keys.get(group)
    if old is None:
        keys[group] = x
    elif old < x:
        d = old - x  # -inf for a NEVER key
        keys[group] = x if d <= _NEGLIGIBLE else x + math.log2(1.0 + 2.0**d)
    elif x - old > _NEGLIGIBLE:
        keys[group] = old + math.log2(1.0 + 2.0 ** (x - old))


def score_of(exponent: float) -> float:
    """``2 ** exponent``, saturating to ``inf`` instead of raising on overflow."""
    try:
        return 2.0**exponent
    except OverflowError:
        return math.inf


class RatingPolicy(ABC, Generic[G]):
    """A rating of groups from their accesses; see the module docstring for the key/offset scheme.

    Subclasses implement :meth:`_key_after` (the new key of a group after one
    access) and :meth:`offset`.  Everything else — bookkeeping of which
    groups changed, ranking, restoring keys saved elsewhere — is shared.  A
    subclass that replaces :meth:`access` (:class:`LRFUPolicy` does, for
    speed) keeps the two protected tables itself: ``_keys`` (group -> key,
    one dict object for the policy's life: readers may hold it) and
    ``_touched`` (the groups accessed since :meth:`take_touched`).
    """

    #: entry-point name of the policy
    name = ""

    def __init__(self, half_life: float = 86400.0, epoch: float = 0.0):
        if not half_life > 0:
            raise ValueError("half_life must be > 0 seconds")
        self.half_life = float(half_life)
        self.epoch = float(epoch)
        self._keys: dict[G, float] = {}
        self._touched: set[G] = set()

    # -- updating ---------------------------------------------------------
    @abstractmethod
    def _key_after(self, key: float, t: float, weight: float) -> float:
        """The key of a group whose key was ``key`` after one access at ``t``."""

    @abstractmethod
    def offset(self, now: float) -> float:
        """The common shift of every key at time ``now``: ``log2(score) = key - offset(now)``."""

    def access(self, group: G, t: float, weight: float = 1.0, size: float = 1.0) -> None:
        """Record one access of ``group`` at unix time ``t``, worth ``weight`` (> 0).  ``size`` is the group's
        size, for policies that model a cache (``lrfu-adaptive``, :mod:`.adaptive`); the others ignore it."""
        if not weight > 0:
            raise ValueError("access weight must be > 0")
        self._keys[group] = self._key_after(self._keys.get(group, NEVER), float(t), float(weight))
        self._touched.add(group)

    def set_key(self, group: G, key: float) -> None:
        """Restore a key computed earlier (e.g. saved in a database)."""
        self._keys[group] = float(key)
        self._touched.add(group)

    def forget(self, group: G) -> None:
        """Drop a group (its history was purged)."""
        self._keys.pop(group, None)
        self._touched.discard(group)

    def take_touched(self) -> set[G]:
        """The groups accessed since the previous call (the incremental work of a cycle)."""
        touched, self._touched = self._touched, set()
        return touched

    def clear_touched(self) -> None:
        """Forget which groups were accessed, as :meth:`take_touched` does, for a caller that has no use for them
        (the simulator)."""
        self._touched.clear()

    # -- reading ----------------------------------------------------------
    def key(self, group: G) -> float:
        """The time-invariant ordering key of ``group`` (``-inf`` if never accessed)."""
        return self._keys.get(group, NEVER)

    def score_of_key(self, key: float, now: float) -> float:
        """The score at ``now`` of a group (or file) whose key is ``key``."""
        if key == NEVER:
            return 0.0
        return score_of(key - self.offset(now))

    def score(self, group: G, now: float) -> float:
        """The score of ``group`` at ``now`` (0.0 if never accessed)."""
        return self.score_of_key(self.key(group), now)

    def top(self, n: int, now: float) -> list[tuple[G, float]]:
        """The ``n`` best groups with their scores at ``now``, best first."""
        best = heapq.nlargest(n, self.keys().items(), key=itemgetter(1))
        return [(group, self.score_of_key(key, now)) for group, key in best]

    def keys(self) -> dict[G, float]:
        """All keys (read-only view semantics: do not modify)."""
        return self._keys

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, group: object) -> bool:
        return group in self._keys


class LRFUPolicy(RatingPolicy[G]):
    """Least Recently/Frequently Used: the sum of access weights halving every half-life."""

    name = "lrfu"

    def _key_after(self, key: float, t: float, weight: float) -> float:
        return log_add(key, math.log2(weight) + (t - self.epoch) / self.half_life)

    def access(self, group: G, t: float, weight: float = 1.0, size: float = 1.0) -> None:
        """:meth:`RatingPolicy.access` with :meth:`_key_after` inlined as :func:`add_key` (the same arithmetic, the
        same keys): the hot path of the coordinator's history rebuild and of every simulator replay."""
        if weight == 1.0:
            x = (t - self.epoch) / self.half_life  # math.log2(1.0) + ... is exactly this
        elif weight > 0:
            x = math.log2(weight) + (t - self.epoch) / self.half_life
        else:
            raise ValueError("access weight must be > 0")
        add_key(self._keys, group, x)
        self._touched.add(group)

    def offset(self, now: float) -> float:
        return (now - self.epoch) / self.half_life


class LRUPolicy(RatingPolicy[G]):
    """Least Recently Used: only the last access counts (weights ignored)."""

    name = "lru"

    def _key_after(self, key: float, t: float, weight: float) -> float:
        return max(key, (t - self.epoch) / self.half_life)

    def offset(self, now: float) -> float:
        return (now - self.epoch) / self.half_life


class LFUPolicy(RatingPolicy[G]):
    """Least Frequently Used: the plain sum of access weights (half-life ignored)."""

    name = "lfu"

    def _key_after(self, key: float, t: float, weight: float) -> float:
        return log_add(key, math.log2(weight))

    def offset(self, now: float) -> float:
        return 0.0


def best_key(group_keys: Iterable[float]) -> float:
    """The group max rule: a file's key is the best key among its groups' keys."""
    return max(group_keys, default=NEVER)


def normalised_key(key: float, size: int | None, unit: int = GIB) -> float:
    """``key`` of the score per ``unit`` bytes (size normalisation, in the log domain).

    A file of unknown (or zero) size counts as one unit, so it is neither
    favoured nor punished against a file of exactly one unit.
    """
    if key == NEVER or not size:
        return key
    return key - math.log2(size / unit)


def file_score(
    policy: RatingPolicy[G],
    groups: Iterable[G],
    now: float,
    size: int | None = None,
    per_size: bool = False,
    unit: int = GIB,
) -> float:
    """The score of a file at ``now``: the best score of its ``groups``, per ``unit`` bytes if ``per_size``."""
    key = best_key(policy.key(g) for g in groups)
    if per_size:
        key = normalised_key(key, size, unit)
    return policy.score_of_key(key, now)

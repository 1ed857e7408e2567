"""A simulation run: which policies at which cache sizes, built from a :class:`RunSpec`, over one trace.

Baseline policies (``lru``, ``lfu``, ``arc`` and any a site adds) are plugins
of the entry-point group ``htda.simulator.policies``; HTDA's policy is built
around a rating policy of the coordinator's group ``htda.policies``
(``lrfu`` by default), once per half-life.

With ``nodes > 1`` the baselines run as that many independent caches of
``capacity / nodes`` bytes, each request going to the node of its group (so
the files of a group share a node), and HTDA runs as the pool does: the
coordinator's placement fills the nodes every ``cycle`` seconds
(:class:`~.placed.PlacedHTDAPolicy`).  A ``cycle`` on one node adds that
cycle-driven HTDA next to the demand-fetched one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from ..coordinator.adaptive import DEFAULT_HALF_LIVES, LAYOUTS, AdaptiveLRFUPolicy
from ..coordinator.admission import ADMISSIONS, make_admission
from ..node.plugins import PluginError, load
from ..units import duration_text
from .engine import ReplayResult, replay
from .htda_policy import HTDAPolicy
from .offline import BeladyPolicy
from .placed import PlacedHTDAPolicy
from .policies import CachePolicy
from .trace import NO_GROUP, Chunk

__all__ = ["AUTO", "RunSpec", "PartitionedPolicy", "WithoutGroups", "WITHOUT_GROUPS", "simulate", "htda_label",
           "hindsight_label", "is_hindsight_label", "SIMULATOR_POLICIES", "RATING_POLICIES"]

SIMULATOR_POLICIES = "htda.simulator.policies"
RATING_POLICIES = "htda.policies"

#: the half-life "auto": HTDA with the coordinator's ``lrfu-adaptive`` rating (:mod:`htda.coordinator.adaptive`),
#: starting at 1 day and choosing among its candidate half-lives online
AUTO = 0.0
AUTO_START = 86400.0


@dataclass
class RunSpec:
    """What to compare: cache sizes (bytes) x (baselines + HTDA at each half-life) + offline bounds."""

    capacities: list[int]
    half_lives: list[float] = field(default_factory=lambda: [300.0, 3600.0, 86400.0])
    baselines: list[str] = field(default_factory=lambda: ["lru", "lfu", "arc"])
    rating: str = "lrfu"
    per_size: bool = False
    accesses: str = "job"
    nodes: int = 1
    belady: bool = True
    bound: bool = True
    #: seconds between placement cycles; None: 300 with several nodes, no placement on one node
    cycle: float | None = None
    hysteresis: float = 2.0
    #: HTDA's admission filters to compare (:data:`~htda.coordinator.admission.ADMISSIONS`), each at every half-life
    admissions: list[str] = field(default_factory=lambda: ["none"])
    #: the half-lives "auto" chooses among (the coordinator's ``adaptive_half_lives``; None: its default)
    candidates: list[float] | None = None
    #: also replay each HTDA configuration with the trace's groups removed: the group rule's effect, by difference
    without_groups: bool = False
    #: also replay each of the candidates "auto" chooses among alone (every half-life in every layout, never
    #: switching): the best of them in hindsight beside the online choice
    hindsight: bool = False
    #: which sample of the groups the adaptive rating's shadow caches replay (its ``sample_seed``; 0: the default)
    sample_seed: int = 0
    #: the trace's distinct objects, if known (0: not known): HTDA's tables start with room for them
    objects: int = 0
    #: processes replaying the policies at once (each policy whole in one; forked from this one)
    jobs: int = 1

    def __post_init__(self) -> None:
        if self.cycle is None and self.nodes > 1:
            self.cycle = 300.0
        if self.cycle is not None and not self.cycle > 0:
            raise ValueError("the placement cycle must be > 0 seconds")
        if self.jobs < 1:
            raise ValueError("jobs must be >= 1")
        if not self.capacities or any(c < 0 for c in self.capacities):
            raise ValueError("give at least one cache size, each >= 0 bytes")
        if any(not (h > 0 or h == AUTO) for h in self.half_lives):
            raise ValueError("half-lives must be > 0 seconds (or auto)")
        if self.nodes < 1:
            raise ValueError("nodes must be >= 1")
        if self.sample_seed < 0:
            raise ValueError("the sample seed must be >= 0")
        if self.candidates is not None and (not self.candidates or any(not h > 0 for h in self.candidates)):
            raise ValueError("the adaptive rating's candidate half-lives must be > 0 seconds")
        if not self.admissions or any(a not in ADMISSIONS for a in self.admissions):
            raise ValueError(f"admission must be one of {', '.join(ADMISSIONS)}")
        if self.hindsight and (AUTO not in self.half_lives or self.nodes > 1 or self.rating != "lrfu"):
            raise ValueError("hindsight compares the candidates of the half-life auto with it: give --half-lives "
                             "auto, on one node, with the lrfu rating")


def htda_label(half_life: float, admission: str = "none") -> str:
    """``htda(6h)``-style label of HTDA's policy at one half-life; ``htda(6h)+tinylfu`` with an admission filter."""
    suffix = "" if admission == "none" else f"+{admission}"
    return f"htda({'auto' if half_life == AUTO else duration_text(half_life)}){suffix}"


def hindsight_label(half_life: float, layout: int) -> str:
    """``htda(1d, probation)``: one candidate of the half-life auto replayed alone (``RunSpec.hindsight``)."""
    return f"{htda_label(half_life)[:-1]}, {LAYOUTS[layout]})"


def is_hindsight_label(label: str) -> bool:
    """Whether ``label`` is one of :func:`hindsight_label`'s."""
    return label.startswith("htda(") and label.endswith(tuple(f", {name})" for name in LAYOUTS))


#: the label of a policy replayed by :class:`WithoutGroups`: ``htda(auto) no groups``
WITHOUT_GROUPS = " no groups"


class WithoutGroups(CachePolicy):
    """A policy replayed as if the trace had no groups (every request its own group), labelled ``... no groups``:
    beside the same policy with them, the effect of the group rule."""

    def __init__(self, inner: CachePolicy):
        super().__init__(inner.capacity, inner.label + WITHOUT_GROUPS)
        self.name, self.inner = inner.name, inner

    def replay(self, times, ids, sizes, groups):
        hits = self.inner.replay(times, ids, sizes, [NO_GROUP] * len(ids))
        self._take_totals()
        return hits

    def finish(self) -> None:
        self.inner.finish()
        self._take_totals()

    def _take_totals(self) -> None:
        self.staged, self.evicted, self.used = self.inner.staged, self.inner.evicted, self.inner.used


class PartitionedPolicy(CachePolicy):
    """``nodes`` caches of one policy; each request goes to the node of its group (or object)."""

    def __init__(self, make: Callable[[int], CachePolicy], capacity: int, nodes: int):
        self.parts = [make(capacity // nodes) for _ in range(nodes)]
        super().__init__(capacity, self.parts[0].label)
        self.name = self.parts[0].name

    def replay(self, times, ids, sizes, groups):
        n = len(self.parts)
        routed: list[tuple[list, list, list, list]] = [([], [], [], []) for _ in range(n)]
        for request in zip(times, ids, sizes, groups):
            key = request[3] if request[3] != NO_GROUP else request[1]
            part = routed[key % n]
            for column, value in zip(part, request):
                column.append(value)
        hits = hit_bytes = 0
        for policy, requests in zip(self.parts, routed):
            if requests[0]:
                h, b = policy.replay(*requests)
                hits += h
                hit_bytes += b
        self.staged = sum(p.staged for p in self.parts)
        self.evicted = sum(p.evicted for p in self.parts)
        self.used = sum(p.used for p in self.parts)
        return hits, hit_bytes


def _plugin(group: str, name: str):
    try:
        return load(group, name)
    except PluginError as exc:
        raise ValueError(str(exc)) from None  # a bad name on the command line is bad input, not a crash


def build_policies(spec: RunSpec) -> list[CachePolicy]:
    """The online policies of ``spec``, one per (policy, cache size)."""
    makers: list[Callable[[int], CachePolicy]] = []
    for name in spec.baselines:
        makers.append(_plugin(SIMULATOR_POLICIES, name))  # a baseline policy class is built as cls(capacity)
    rating_cls = _plugin(RATING_POLICIES, spec.rating)

    def rating(h: float):
        if h == AUTO:
            return AdaptiveLRFUPolicy(half_life=AUTO_START, half_lives=spec.candidates or DEFAULT_HALF_LIVES,
                                      sample_seed=spec.sample_seed)
        return rating_cls(half_life=h)

    def htda(h: float, label: str, admission: str) -> Callable[[int], CachePolicy]:
        return lambda cap: HTDAPolicy(cap, rating(h), label=label, per_size=spec.per_size,
                                      accesses=spec.accesses, admission=make_admission(admission),
                                      objects=spec.objects)

    def fixed_candidate(h: float, layout: int) -> Callable[[int], CachePolicy]:
        return lambda cap: HTDAPolicy(cap, AdaptiveLRFUPolicy.fixed(h, layout), label=hindsight_label(h, layout),
                                      per_size=spec.per_size, accesses=spec.accesses, objects=spec.objects)

    def without_groups(make: Callable[[int], CachePolicy]) -> Callable[[int], CachePolicy]:
        return lambda cap: WithoutGroups(make(cap))

    def placed(h: float, label: str, cycle: float) -> Callable[[int], CachePolicy]:
        return lambda cap: PlacedHTDAPolicy(cap, rating(h), nodes=spec.nodes, cycle=cycle,
                                            hysteresis=spec.hysteresis, label=label, accesses=spec.accesses)

    for admission in spec.admissions:
        for half_life in spec.half_lives:
            label = htda_label(half_life, admission)
            if spec.rating != "lrfu" and half_life != AUTO:
                label += f"-{spec.rating}"
            if spec.nodes == 1:
                makers.append(htda(half_life, label, admission))
                if spec.without_groups:
                    makers.append(without_groups(makers[-1]))
            if spec.cycle is not None and admission == spec.admissions[0]:
                makers.append(placed(half_life, label + " placed", spec.cycle))
    if spec.hindsight:
        makers += [fixed_candidate(h, layout) for h in sorted(set(spec.candidates or DEFAULT_HALF_LIVES) | {AUTO_START})
                   for layout in range(len(LAYOUTS))]
    policies = []
    for capacity in spec.capacities:
        for make in makers:
            policy = make(capacity)
            if spec.nodes > 1 and not isinstance(policy, PlacedHTDAPolicy):
                policy = PartitionedPolicy(make, capacity, spec.nodes)
            policies.append(policy)
    return policies


def simulate(chunks: Iterable[Chunk] | Callable[[], Iterable[Chunk]], spec: RunSpec, progress=None,
             window: int | None = None) -> ReplayResult:
    """Replay ``chunks`` (or, a function giving them again, each policy in turn over all of them:
    :func:`~.engine.replay`) through every policy of ``spec``, then Belady and the PFOO-L bound; ``window``
    requests per point of the time series."""
    offline = [BeladyPolicy(c) for c in spec.capacities] if spec.belady else []
    bounds = spec.capacities if spec.bound else []
    # the policies are this function's own, so each one's tables go once its totals are taken
    return replay(chunks, build_policies(spec), offline, bounds, progress, window, release=True, jobs=spec.jobs)

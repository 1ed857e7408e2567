"""The coordinator component: plugged into a node through the ``htda.components`` entry point.

It owns the database, the in-memory rating and the work-cycle thread; the
logic lives in :class:`~htda.coordinator.core.Coordinator`, the endpoints in
:mod:`~htda.coordinator.api`.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from ..node import plugins
from ..node.component import Component
from ..node.config import ConfigError, Field, Section, fraction, non_negative, one_of, plugin_of, positive
from ..node.periodic import Periodic
from ..node.rest import HTTPError, Request
from ..protocol.cache import CacheFacts
from ..protocol.node import facts_in
from . import api
from .adaptive import ASKING, DEFAULT_HALF_LIVES, LIRS, PLAIN, PROBATION, AdaptiveLRFUPolicy
from .admission import ADMISSIONS
from .core import CacheNode, Coordinator, CycleReport
from .leader import leadership_for
from .rating import LRFUPolicy
from .store import ACCESS_ON, Store

if TYPE_CHECKING:
    from ..node.pool import Member
    from ..node.rest import Route

__all__ = ["CoordinatorComponent"]

T = TypeVar("T")

# how the log names each layout of the adaptive rating (htda.coordinator.adaptive)
_LAYOUT_WORDS = {PLAIN: "admitting every group", ASKING: "asking new groups to beat what they displace",
                 PROBATION: "putting new groups on probation (past the best tenth of the space, placed once read "
                            "again)",
                 LIRS: "laying the placement out as LIRS (past the best hundredth of the space, placed only if "
                       "read again above the lowest placed)"}


def _at_least_one(value: float) -> str | None:
    return None if value >= 1.0 else "must be at least 1"


def _unix_time(value: float) -> str | None:
    # keys are logs of sums scaled from the epoch: one far from the accesses' times leaves them no precision
    return None if 0.0 <= value <= _YEAR_2100 else "must be a unix time from 0 (1970) to 4102444800 (2100)"


_YEAR_2100 = 4102444800.0


def _half_lives(values: list[float]) -> str | None:
    return None if values and all(v > 0 for v in values) else "must list at least one half-life, each > 0 seconds"


class CoordinatorComponent(Component):
    """Job history in a database, LRFU rating of file groups, placement over the pool's cache nodes."""

    name = "coordinator"
    config_schema = Section({
        "database": Field(str, "", "SQLAlchemy URL of the database (default: SQLite file coordinator.db in the "
                                   "node's data_dir)"),
        "db_schema": Field(str, "", "PostgreSQL schema holding the tables (default: the search path)"),
        "policy": Field(str, "lrfu", "rating policy: an htda.policies entry point (lrfu, lru, lfu, lrfu-adaptive)",
                        check=plugin_of("htda.policies")),
        "half_life": Field(float, 86400.0, "seconds after which an access weighs half", check=positive),
        "epoch": Field(float, 0.0, "reference time T0 of the rating keys (any fixed unix time)", check=_unix_time),
        "adaptive": Field(bool, True, "with policy lrfu: choose the half-life online among adaptive_half_lives by "
                                      "shadow caches, starting at half_life (the lrfu-adaptive policy; "
                                      "docs/coordinator.rst); false: always half_life"),
        "adaptive_half_lives": Field(list, list(DEFAULT_HALF_LIVES),
                                     "policy lrfu-adaptive: the candidate half-lives (seconds) it chooses among "
                                     "online by shadow caches (docs/coordinator.rst)", item=float,
                                     check=_half_lives),
        "adaptive_max_sampled": Field(int, 16384, "policy lrfu-adaptive: most groups its shadow caches sample",
                                      check=positive),
        "adaptive_admission": Field(bool, True, "policy lrfu-adaptive: also choose online, by a second shadow per "
                                                "half-life, whether a group must have been read before, more than "
                                                "the placed groups it displaces, starting with it (used while "
                                                "'admission' is none; docs/coordinator.rst)"),
        "adaptive_probation": Field(bool, True, "policy lrfu-adaptive: also choose online, by a third shadow per "
                                                "half-life, whether new groups go on probation (S3-FIFO's quick "
                                                "demotion: past the best tenth of the space, a group displaces "
                                                "placed ones only once read again; used while 'admission' is "
                                                "none; docs/coordinator.rst)"),
        "adaptive_lirs": Field(bool, True, "policy lrfu-adaptive: also choose online, by a fourth shadow per "
                                           "half-life, whether to lay the placement out as LIRS does (past the "
                                           "best hundredth of the space, a group displaces placed ones only if "
                                           "its rating before its latest access beats the lowest placed), "
                                           "starting with it (used while 'admission' is none; "
                                           "docs/coordinator.rst)"),
        "admission": Field(str, "none", "admission filter before a group displaces placed ones: 'tinylfu' "
                                           "(only if a frequency sketch of recent accesses finds it more frequent "
                                           "than their groups; docs/coordinator.rst) or 'none' (the rating alone)",
                           check=one_of(*ADMISSIONS)),
        "per_size": Field(bool, False, "rate value per GiB: divide group and file scores by their size"),
        "cycle": Field(float, 30.0, "seconds between work cycles", check=positive),
        "hysteresis": Field(float, 2.0, "how many times better a file must score to displace a placed one",
                            check=_at_least_one),
        "fill": Field(float, 0.95, "fraction of each cache node's capacity to assign", check=fraction),
        "candidate_factor": Field(float, 1.5, "rate candidates up to this multiple of the pool's capacity",
                                  check=_at_least_one),
        "unknown_size": Field(int, 1 << 30, "bytes assumed for a file whose size is not known yet",
                              check=positive),
        "release_ttl": Field(float, 3600.0, "seconds a released file stays off the node that released it",
                             check=positive),
        "access_on": Field(str, "submit", "what counts as an access of a job's inputs: 'submit' (the job "
                                          "record from the translate hook; right for the shipped in-place route, "
                                          "which runs no update/finalize hook) or 'start' (its started event)",
                           check=one_of(*ACCESS_ON)),
        "max_batch": Field(int, 100_000, "most jobs, events or LFNs in one request", check=positive),
        "max_defer": Field(float, 600.0, "seconds a file's staging may wait while jobs read it from storage "
                                         "(reported by cache nodes; 0: never wait)", check=non_negative),
        "first_read_wait": Field(float, 0.0, "seconds a group wanted for the first time waits to be placed "
                                             "until a job reads it, so that its copy goes to that job's node "
                                             "(for workers that read storage through a read-through cache; "
                                             "0: place at once)", check=non_negative),
        "max_copies": Field(int, 3, "most copies of a popular group: groups read by many jobs get copies in "
                                    "proportion to their popularity in room no first copy wants, copied from "
                                    "the nodes that hold them, never from storage (1: no replicas)",
                            check=positive),
        "replica_headroom": Field(float, 2.0, "copies of a popular group serve this many times its mean share of "
                                              "the pool's jobs (bursts of jobs want its holders at once)",
                                  check=_at_least_one),
        "takeover_poll": Field(float, 2.0, "seconds between a standby coordinator's tries of the leader lock "
                                           "(coordinators sharing a database: one leads, the others wait to take "
                                           "over), and between the leader's checks that it still holds it",
                               check=positive),
        "full_every": Field(int, 10, "after this many cycles that only re-placed the groups accessed since the "
                                     "last one, place every candidate again", check=positive),
    })

    def __init__(self, node, config: dict[str, Any]):
        super().__init__(node, config)
        try:
            policy_cls = plugins.load("htda.policies", config["policy"])
        except plugins.PluginError as exc:
            raise ConfigError(f"{node.source}: 'coordinator.policy': {exc}") from None
        url = config["database"] or f"sqlite:///{node.data_dir / 'coordinator.db'}"
        store = Store(url, schema=config["db_schema"] or None, access_on=config["access_on"], clock=node.clock)
        options: dict[str, Any] = {}
        if policy_cls is LRFUPolicy and config["adaptive"]:
            policy_cls = AdaptiveLRFUPolicy
        if policy_cls is AdaptiveLRFUPolicy:
            options = {"half_lives": config["adaptive_half_lives"], "max_sampled": config["adaptive_max_sampled"],
                       "choose_admission": config["adaptive_admission"],
                       "choose_probation": config["adaptive_probation"], "choose_lirs": config["adaptive_lirs"]}
        self.core = Coordinator(store, policy_cls(half_life=config["half_life"], epoch=config["epoch"], **options),
                                per_size=config["per_size"], hysteresis=config["hysteresis"], fill=config["fill"],
                                candidate_factor=config["candidate_factor"], unknown_size=config["unknown_size"],
                                release_ttl=config["release_ttl"], full_every=config["full_every"],
                                max_defer=config["max_defer"], first_read_wait=config["first_read_wait"],
                                max_copies=config["max_copies"], replica_headroom=config["replica_headroom"],
                                admission=config["admission"], clock=node.clock)
        # None: nothing else can share this database (in-memory SQLite), so this coordinator always leads
        self.leadership = leadership_for(store.engine.url, config["db_schema"] or None)
        # written by the htda-coordinator-leader thread (and start); read by REST workers and the pool
        self.leading = False
        self._leader_loop = Periodic("htda-coordinator-leader", config["takeover_poll"], self._contend, self.log,
                                     first_delay=config["takeover_poll"], clock=node.clock)
        self._incarnations: dict[str, float] = {}  # cache node -> its 'started', to tell restarts from first sight
        # The pool view fills within a heartbeat or two; a cycle before that would take every cache node
        # not heard from yet for departed and move its files.
        self._cycles_loop = Periodic("htda-coordinator-cycle", config["cycle"], self.run_cycle, self.log,
                                     first_delay=2 * node.heartbeat_interval, clock=node.clock)
        self.reports: deque[CycleReport] = deque(maxlen=20)  # the most recent cycles, for /nodes
        m = node.metrics
        self._received = m.counter("htda_coordinator_received_total", "job records and events received",
                                   ("kind", "outcome"))
        self._cycles = m.counter("htda_coordinator_cycles_total", "work cycles run", ("outcome",))
        self._cycle_seconds = m.counter("htda_coordinator_cycle_seconds_total", "time spent in work cycles")
        self._moved = m.counter("htda_coordinator_moved_files_total", "files whose node changed")
        m.gauge("htda_coordinator_cycle", "number of the last work cycle", callback=lambda: self.core.cycle)
        m.gauge("htda_coordinator_groups", "rated groups", callback=lambda: self.core.sizes()["groups"])
        m.gauge("htda_coordinator_files", "known files", callback=lambda: self.core.sizes()["files"])
        m.gauge("htda_coordinator_deferred_files", "files whose staging waits for jobs reading them from storage",
                callback=lambda: self.core.sizes()["deferred"])
        m.gauge("htda_coordinator_placed_files", "files assigned to cache nodes",
                callback=lambda: self.core.sizes()["placed"])
        m.gauge("htda_coordinator_replica_files", "replicas assigned to cache nodes (copies beyond a file's first)",
                callback=lambda: self.core.sizes()["replicas"])
        policy = self.core.state.policy
        m.gauge("htda_coordinator_rating_half_life_seconds", "the half-life the rating ranks with now",
                callback=lambda: policy.half_life)
        if isinstance(policy, AdaptiveLRFUPolicy):
            m.gauge("htda_coordinator_rating_admitting", "1 while the adaptive rating's admission shadows win (a "
                    "group must have been read before, more than the placed groups it displaces)",
                    callback=lambda: float(policy.admitting))
            m.gauge("htda_coordinator_rating_probation", "1 while the adaptive rating's probation shadows win (past "
                    "the best tenth of the space, a group must have been read again to displace placed ones)",
                    callback=lambda: float(policy.probation))
            m.gauge("htda_coordinator_rating_lirs", "1 while the adaptive rating's LIRS shadows win (past the best "
                    "hundredth of the space, a group must have been read again, more recently than the lowest placed, "
                    "to displace placed ones)", callback=lambda: float(policy.layout == LIRS))
            m.gauge("htda_coordinator_rating_switches", "switches of the adaptive rating (half-life or layout) "
                    "since start", callback=lambda: policy.switches)
            m.gauge("htda_coordinator_rating_smaller_shadows", "1 while the adaptive rating's miniature caches have "
                    "all hit alike (the placement has not filled) and the layout is the smaller ones' pick",
                    callback=lambda: float(policy.smaller is not None))
            m.gauge("htda_coordinator_rating_shadow_hit_ratio", "each candidate's miniature cache: its decayed hits "
                    "over the decayed requests of the latest rounds (what the choice compares)",
                    ("half_life_seconds", "layout"),
                    callback=lambda: self._under_state_lock(policy.shadow_hit_ratios))
        self._switches_logged = 0  # the adaptive rating's switches already logged (the cycle thread's)

    def _under_state_lock(self, read: Callable[[], T]) -> T:
        with self.core.state.lock:  # the rating's lock: ingest and the cycle change it
            return read()

    # -- life cycle --------------------------------------------------------------------
    def loops(self) -> list[Periodic]:
        return [self._cycles_loop, *([self._leader_loop] if self.leadership is not None else [])]

    def start(self) -> None:
        if self.leadership is None or self.leadership.try_acquire():
            self._lead()
        else:
            self.log.info("standby: another coordinator holds the leader lock (%s); trying every %g s",
                          self.leadership.describe(), self.config["takeover_poll"])
        self._cycles_loop.start()
        if self.leadership is not None:
            self._leader_loop.start()

    def _lead(self) -> None:
        """Load the database and serve: this coordinator holds the lock now."""
        seconds = self.core.load()
        sizes = self.core.sizes()
        self.log.info("leading: rebuilt the rating of %d groups and %d files from %s in %.2f s (cycle %d)",
                      sizes["groups"], sizes["files"], self.core.describe_database(), seconds, self.core.cycle)
        self.leading = True
        self.wake()

    def _contend(self) -> None:
        """The leader checks that it still holds the lock; a standby tries to take it."""
        assert self.leadership is not None
        if self.leading:
            if not self.leadership.held():
                self.leading = False
                self.log.error("lost the leader lock (%s): standing by", self.leadership.describe())
        elif self.leadership.try_acquire():
            self.log.warning("took over as the leading coordinator (%s)", self.leadership.describe())
            self._lead()

    def stop(self) -> None:
        self._leader_loop.stop(timeout=10)
        self._cycles_loop.stop(timeout=10)
        self.leading = False
        self.core.close()
        if self.leadership is not None:
            self.leadership.release()

    def serving(self) -> bool:
        return self.leading

    def routes(self) -> list["Route"]:
        return [dataclasses.replace(route, handler=self._while_leading(route.handler)) for route in api.routes(self)]

    def _while_leading(self, handler: Callable[[Request], Any]) -> Callable[[Request], Any]:
        """``handler``, answering 503 while this coordinator stands by (callers go on to the leader)."""
        def guarded(request: Request) -> Any:
            if not self.leading:
                raise HTTPError(503, "this coordinator is a standby: another one leads (see the pool's members "
                                     "with the coordinator role)")
            return handler(request)
        return guarded

    def heartbeat_info(self) -> dict[str, Any]:
        return {"cycle": self.core.cycle, "placed_files": self.core.sizes()["placed"]}

    def on_member_joined(self, member: "Member") -> None:
        if "cache" in member.roles and self.leading:
            seen = self._incarnations.get(member.name)
            self._incarnations[member.name] = member.started
            if seen is not None and seen != member.started:
                self.core.node_restarted(member.name)  # a new incarnation may have room again
            self.wake()

    def on_member_left(self, member: "Member") -> None:
        if "cache" in member.roles and self.leading:
            self.log.info("cache node %s left the pool: its files are placed again", member.name)
            self.core.forget_reader(member.name)
            self.wake()

    # -- the work cycle --------------------------------------------------------------------
    def cache_nodes(self) -> list[CacheNode]:
        """Live cache members that publish a capacity in their heartbeat."""
        nodes = []
        for member in self.node.members("cache"):
            facts = facts_in(member.info, "cache", CacheFacts)
            if facts is not None and facts.capacity_bytes:
                nodes.append(CacheNode(member.name, member.url, facts.capacity_bytes, facts.free_bytes))
        return nodes

    def run_cycle(self, full: bool = False):
        """One work cycle now (the thread calls it; tests may too); None while no cache node is live."""
        if not self.leading:
            return None
        nodes = self.cache_nodes()
        if not nodes:
            self.log.debug("no live cache node: the placement is kept as it is")
            return None
        try:
            report = self.core.run_cycle(nodes, full=full)
        except Exception:
            self._cycles.inc(outcome="error")
            raise
        self._cycles.inc(outcome="ok")
        self._log_switches()
        self._size_shadows()
        self._cycle_seconds.inc(report.seconds)
        self._moved.inc(report.moved)
        self.reports.append(report)
        return report

    def _log_switches(self) -> None:
        """One line when the adaptive rating changed its half-life or its layout since the last cycle."""
        policy = self.core.state.policy
        if not isinstance(policy, AdaptiveLRFUPolicy) or policy.switches == self._switches_logged:
            return
        self._switches_logged = policy.switches
        self.log.info("rating: ranking with a half-life of %g s, %s (switch %d since start, by its shadow caches)",
                      policy.half_life, _LAYOUT_WORDS[policy.layout], policy.switches)

    def _size_shadows(self) -> None:
        """lrfu-adaptive's shadow caches model a cache of as many groups as the placement holds (the coordinator
        records accesses without sizes: its shadows count groups)."""
        state = self.core.state
        set_capacity = getattr(state.policy, "set_capacity", None)
        if set_capacity is not None:
            with state.lock:  # the shadows change under the lock the accesses take
                best = state.best_group
                set_capacity(len({best.get(fid) for fid in list(self.core.placement)} - {None}))

    def wake(self) -> None:
        """Run the next cycle soon (pool change, release, drain)."""
        self._cycles_loop.wake()

    def count(self, kind: str, accepted: int, duplicates: int) -> None:
        self._received.inc(accepted, kind=kind, outcome="accepted")
        self._received.inc(duplicates, kind=kind, outcome="duplicate")


"""Pool membership through heartbeats to seed nodes.

Every node heartbeats to each seed address (skipping itself) every
``heartbeat_interval`` seconds.  A heartbeat carries the sender's identity
and the small facts its components publish; the answer carries the seed's
member list with each member's *age* (seconds since the seed last heard
from it).  A node merges that list into its own, so every node learns the
whole pool through the seeds, and a member is dropped everywhere once its
age passes ``expiry``.  There is no other state: a node that restarts is a
full member again after its first heartbeat, and a new incarnation (a
different ``started``) is reported to components as a join.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from msgspec import structs

from ..protocol.clients import NodeClient
from ..protocol.node import Heartbeat, MemberInfo
from .client import Client, ClientError
from .clock import SYSTEM_CLOCK, Clock

__all__ = ["Member", "Pool"]

log = logging.getLogger("htda.pool")


@dataclass
class Member:
    """What a node knows of one pool member."""

    name: str
    url: str
    roles: list[str]
    version: str
    started: float
    info: dict[str, Any] = field(default_factory=dict)
    last_seen: float = 0.0  # on this node's monotonic clock (node.clock)

    def age(self, now: float) -> float:
        return max(0.0, now - self.last_seen)

    def to_json(self, now: float) -> dict[str, Any]:
        return {"name": self.name, "url": self.url, "roles": self.roles, "version": self.version,
                "started": self.started, "age": round(self.age(now), 3), "info": self.info}


class Pool:
    """This node's view of the pool, kept fresh by heartbeats.

    ``on_join`` / ``on_leave`` are called (outside the lock) with a
    :class:`Member` when a node joins or restarts, and when it expires.
    """

    def __init__(self, me: Member, seeds: list[str], client: Client, interval: float, expiry: float,
                 info: Callable[[], dict[str, Any]] = dict,
                 roles: Callable[[], list[str]] | None = None,
                 on_join: Callable[[Member], None] | None = None,
                 on_leave: Callable[[Member], None] | None = None,
                 clock: Clock = SYSTEM_CLOCK):
        self.me = me
        self.clock = clock
        self.seeds = [s.rstrip("/") for s in seeds]
        self.client, self.interval, self.expiry = client, interval, expiry
        self._info = info
        self._roles = roles  # this node's roles now, when they can change (a standby taking over)
        self._on_join, self._on_leave = on_join, on_leave
        self._members: dict[str, Member] = {}
        self._answer: tuple[float, bytes] | None = None  # (made at, encoded member list): see receive_json
        # guards _members and _answer: the htda-pool thread, REST workers answering heartbeats and any caller
        # of members() (which expires silent members) all write them; on_join/on_leave run after it is released
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.heartbeats_sent = 0
        self.heartbeat_failures = 0

    # -- queries -----------------------------------------------------------
    def members(self, role: str | None = None) -> list[Member]:
        """Live members (this node included), optionally only those with ``role``."""
        self.expire()
        with self._lock:
            everyone = [self._refresh_me(), *self._members.values()]
        return [m for m in everyone if role is None or role in m.roles]

    def member(self, name: str) -> Member | None:
        return next((m for m in self.members() if m.name == name), None)

    def snapshot(self) -> list[dict[str, Any]]:
        now = self.clock.monotonic()
        return sorted((m.to_json(now) for m in self.members()), key=lambda m: m["name"])

    def _refresh_me(self) -> Member:
        self.me.last_seen = self.clock.monotonic()
        if self._roles is not None:
            self.me.roles = self._roles()
        return self.me

    # -- the heartbeat protocol ---------------------------------------------
    def payload(self) -> Heartbeat:
        """What this node sends in a heartbeat."""
        self.me.info = self._info()
        me = self._refresh_me()
        return Heartbeat(name=me.name, url=me.url, roles=me.roles, version=me.version, started=me.started,
                         info=me.info)

    def receive_json(self, beat: dict[str, Any]) -> bytes:
        """Handle a heartbeat from another node; answer with the member list, encoded.  A seed of many members
        answers every heartbeat with the same list, so the encoded list is reused for up to :attr:`answer_ttl`
        seconds, and made anew at once when a member joins, restarts or leaves.  The ages in a reused list are
        up to that much too small, so another member may keep a silent member at most that much longer than its
        expiry."""
        now = self.clock.monotonic()
        if beat["name"] != self.me.name:
            self._upsert(beat, now)
        with self._lock:
            cached = self._answer
            if cached is not None and now - cached[0] < self.answer_ttl:
                return cached[1]
        answer = json.dumps({"members": self.snapshot(), "interval": self.interval, "expiry": self.expiry},
                            separators=(",", ":")).encode()
        with self._lock:
            self._answer = (now, answer)
        return answer

    @property
    def answer_ttl(self) -> float:
        """Seconds a seed reuses its encoded member list: a tenth of the interval, at most one second."""
        return min(1.0, self.interval / 10)

    def merge(self, members: list[MemberInfo]) -> None:
        """Fold a seed's member list into this node's view."""
        now = self.clock.monotonic()
        for entry in members:
            if entry.name != self.me.name and entry.age < self.expiry:
                self._upsert(structs.asdict(entry), now - entry.age)

    def _upsert(self, entry: dict[str, Any], seen: float) -> None:
        joined: Member | None = None
        left: Member | None = None
        with self._lock:
            known = self._members.get(entry["name"])
            if known is not None and seen <= known.last_seen:
                return
            member = Member(entry["name"], entry["url"], list(entry.get("roles", [])), entry.get("version", ""),
                            float(entry.get("started", 0.0)), dict(entry.get("info") or {}), seen)
            self._members[member.name] = member
            if known is None or known.started != member.started:
                joined, left = member, known
                self._answer = None  # the member list changed: no seed answers the old one any more
        if left is not None:
            log.info("member %s restarted", member.name)
            self._emit(self._on_leave, left)
        if joined is not None:
            if left is None:
                log.info("member %s joined (%s, roles %s)", member.name, member.url, ",".join(member.roles))
            self._emit(self._on_join, joined)

    def expire(self) -> list[Member]:
        """Drop members silent for longer than the expiry; return them."""
        now = self.clock.monotonic()
        with self._lock:
            gone = [m for m in self._members.values() if now - m.last_seen > self.expiry]
            for member in gone:
                del self._members[member.name]
            if gone:
                self._answer = None
        for member in gone:
            log.warning("member %s left the pool (silent for %.1fs)", member.name, now - member.last_seen)
            self._emit(self._on_leave, member)
        return gone

    def _emit(self, callback: Callable[[Member], None] | None, member: Member) -> None:
        if callback is None:
            return
        try:
            callback(member)
        except Exception:  # noqa: BLE001 - a component's bug must not stop membership
            log.exception("pool event handler failed for %s", member.name)

    # -- background loop ----------------------------------------------------
    def beat_once(self) -> None:
        """Send one heartbeat to every seed and merge the answers."""
        payload = self.payload()
        # A slow answer is not a lost heartbeat: wait up to a third of the expiry (bounded by the
        # client's own timeout) so a busy seed does not look dead, but never less than one interval.
        timeout = max(0.5, self.interval, min(self.expiry / 3, self.client.timeout))
        for seed in self.seeds:
            if seed == self.me.url.rstrip("/"):
                continue
            try:
                answer = NodeClient(self.client, seed).heartbeat(payload, timeout=timeout, retries=0)
                self.heartbeats_sent += 1
                self.merge(answer.members)
            except ClientError as exc:
                self.heartbeat_failures += 1
                log.debug("heartbeat to %s failed: %s", seed, exc)
        self.expire()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="htda-pool", daemon=True)
        self._thread.start()

    def stop(self, wait: bool = True) -> None:
        """End the heartbeat loop; ``wait=False`` only asks it to (to stop many pools at once)."""
        self._stop.set()
        if wait and self._thread:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.is_set():
            started = self.clock.monotonic()
            try:
                self.beat_once()
            except Exception:  # noqa: BLE001 - keep heartbeating whatever happens
                log.exception("heartbeat round failed")
            self._stop.wait(max(0.0, self.interval - (self.clock.monotonic() - started)))

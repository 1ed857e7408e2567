"""The submit agent: the node component the job-router hooks talk to on the submit host.

The hooks run as the job's owner, so they must not hold the pool secret, and
whoever answers them decides what that user's job becomes.  They post their
standard input, unsigned, to this component through a UNIX socket only HTDA
can create (:mod:`htda.condor.channel`, ``submit.socket``); the kernel names
the caller's uid, and the agent serves a hook only for that uid's own jobs
(the ad's ``Owner``), root and ``trusted_users`` (the ``condor`` account)
excepted.  The agent, a pool member with the secret, parses the ad with
HTCondor's code, asks a locator, answers the attributes to change, and queues
jobs and state changes for the coordinator, sent in batches by a background
thread so no hook waits for the coordinator.
"""

from __future__ import annotations

import collections
import itertools
import json
import pwd
import threading
from typing import Any

from ..node.client import ClientError
from ..node.component import Component
from ..node.config import Field, ListOf, Section, non_negative, positive, share
from ..node.periodic import Periodic
from ..protocol import coordinator
from ..protocol.base import Endpoint, ProtocolError, check_answer, to_wire
from ..protocol.cache import CacheFacts
from ..protocol.clients import LocatorClient
from ..protocol.node import facts_in
from . import classads
from .channel import Answer, Call, HookServer, Refused
from .homes import Homes
from .hooks import EVENTS_PATH, SUBMIT_SOCKET, TRANSLATE_PATH, split
from .jobinfo import InputMapping, JobInfo, job_ids, job_owner, job_state
from .queue import ScheddQueue
from .readahead import ReadAheadAsker
from .reschedule import Rescheduler
from .sizes import SizeProbe
from .tool import CondorTool
from .translate import Steering, parse_input, translate

__all__ = ["SubmitAgent"]

HOOKS = ("update", "finalize", "cleanup")
#: seconds between two turns of the loop that talks to the schedd (is a reschedule or a queue read due?)
SCHEDD_TICK = 0.2
#: seconds an input keeps its first-read home after the last job that named it
HOME_TTL = 3600.0


class _Outbox:
    """A bounded queue of JSON items sent in batches to the first coordinator that answers."""

    def __init__(self, endpoint: Endpoint[Any], key: str, limit: int):
        self.endpoint, self.key, self.limit = endpoint, key, limit
        self.items: collections.deque = collections.deque()
        self.dropped = 0

    def put(self, item: dict[str, Any]) -> None:
        if len(self.items) >= self.limit:
            self.items.popleft()  # the oldest goes: fresh jobs matter more for placement
            self.dropped += 1
        self.items.append(item)

    def take(self, n: int) -> list[dict[str, Any]]:
        return [self.items.popleft() for _ in range(min(n, len(self.items)))]

    def give_back(self, batch: list[dict[str, Any]]) -> None:
        room = max(0, self.limit - len(self.items))
        self.items.extendleft(reversed(batch[len(batch) - room:] if room < len(batch) else batch))


class SubmitAgent(Component):
    """Serves the hooks on a submit host; see the module docstring."""

    name = "submit"
    config_schema = Section({
        "socket": Field(str, SUBMIT_SOCKET, "the UNIX socket the hooks reach the agent on (mode 0666), in a "
                                            "directory that only root or this node's account can write"),
        "trusted_users": Field(list, lambda: ["condor"], "accounts (besides root) whose hooks may act for any "
                                                         "user's jobs; everyone else's only for their own"),
        "hook_threads": Field(int, 8, "threads answering hooks", check=positive),
        "locators": Field(list, list, "locator URLs (default: the pool's locator members)"),
        "coordinators": Field(list, list, "coordinator URLs (default: the pool's coordinator members)"),
        "local_locator": Field(bool, True, "when this node also runs a locator (and no locators are "
                                           "configured), look up in it directly: no HTTP hop"),
        "lookup_timeout": Field(float, 0.25, "total time for a locator lookup, all locators tried",
                                check=positive),
        "connect_timeout": Field(float, 0.1, "connect timeout of one locator call", check=positive),
        "input_attribute": Field(str, "HTDA_InputFiles", "job attribute listing the inputs (before TransferInput)"),
        "lfn_prefixes": Field(ListOf(Section({
            "prefix": Field(str, help="path or URL prefix in the job ad"),
            "lfn": Field(str, help="LFN prefix it stands for"),
        })), list, "how input paths and URLs map to LFNs"),
        "rank_scale": Field(float, 1e9, "weight of the cache affinity (0..1) in the job's Rank", check=positive),
        "max_preferred": Field(int, 8, "preferred nodes written into the job", check=positive),
        "min_fraction": Field(float, 0.0, "nodes holding no more than this share of the bytes are not preferred",
                              check=share),
        "relative_fraction": Field(float, 0.5, "nodes holding less than this part of the best node's share of the "
                                               "bytes are not preferred (a replica still being copied, a file or two "
                                               "of a group): with steer_requirements the job waits for a better one",
                                   check=share),
        "steer_requirements": Field(bool, False, "also require a preferred node (Requirements untouched if false)"),
        "steer_timeout": Field(float, 600.0, "with steer_requirements: seconds after submission (QDate) a job "
                                             "stops waiting for a preferred node (0: it waits for ever)",
                               check=non_negative),
        "first_read_home": Field(bool, False, "steer a job whose inputs no node holds to one node per input "
                                              "(the same for every job sharing one), so that new data is read "
                                              "once where workers read storage through a read-through cache "
                                              "(docs/cache.rst)"),
        "read_ahead": Field(bool, True, "with first_read_home: ask a job's home to read its inputs through "
                                        "storage as soon as the job is routed, before it starts (the cache "
                                        "node's read_ahead must be on; docs/cache.rst)"),
        "home_timeout": Field(float, 300.0, "with steer_requirements: seconds after submission a job waits "
                                            "for its first-read home (0: for ever)", check=non_negative),
        "cold_first": Field(bool, True, "a job whose inputs no node holds (steered to its first-read home: it "
                                        "reads them all from storage and runs longest) starts before its owner's "
                                        "other jobs of default priority: JobPrio 1 where it is 0 or unset"),
        "reschedule_command": Field(list, lambda: ["condor_reschedule"], "run about a second after the first "
                                    "job of a burst is steered, so steered jobs are matched in a negotiation "
                                    "cycle asked for then, not the next periodic one (empty: never)"),
        "queue_command": Field(list, lambda: ["condor_q"], "with first_read_home: reads the schedd's idle and "
                               "running steered jobs every queue_interval while jobs are counted, so homes weigh "
                               "the jobs each node has now (the shipped in-place route reports no job's end; "
                               "empty: never, jobs count for home_timeout after routing)"),
        "queue_interval": Field(float, 10.0, "seconds between two reads of the schedd's queue", check=positive),
        "condor_config": Field(str, "", "CONDOR_CONFIG for reschedule_command and queue_command (empty: the "
                                        "agent's environment)"),
        "storage_root": Field(str, "", "a local view of storage (NFS or xrootdfs mount) where the agent reads "
                                       "input sizes for the coordinator; empty: no sizes are sent"),
        "max_ad_bytes": Field(int, 1024 * 1024, "largest ad accepted from a hook", check=positive),
        "send_interval": Field(float, 0.2, "seconds between batches to the coordinator", check=positive),
        "batch_size": Field(int, 1000, "jobs or events per batch", check=positive),
        "queue_limit": Field(int, 100_000, "jobs or events kept while no coordinator answers", check=positive),
    })

    def __init__(self, node, config: dict[str, Any]):
        super().__init__(node, config)
        missing = [name for name in config["trusted_users"] if _uid(name) is None]
        if missing:
            self.log.warning("trusted_users %s: no such account yet; looked up again at every call", missing)
        self.channel = HookServer(node.path(config["socket"]), {TRANSLATE_PATH: self._translate,
                                                                EVENTS_PATH: self._event},
                                  config["max_ad_bytes"], threads=config["hook_threads"])
        self.mapping = InputMapping(config["input_attribute"], {p["prefix"]: p["lfn"] for p in config["lfn_prefixes"]})
        self.steering = Steering(config["rank_scale"], config["max_preferred"], config["min_fraction"],
                                 config["steer_requirements"], config["steer_timeout"], config["home_timeout"],
                                 config["cold_first"], config["relative_fraction"])
        self.homes = Homes(ttl=HOME_TTL, window=config["home_timeout"] or HOME_TTL, clock=node.clock)
        self.read_ahead = ReadAheadAsker(node.client, self._cache_url, self.log, node.metrics, clock=node.clock)
        self.jobs = _Outbox(coordinator.JOBS, "jobs", config["queue_limit"])
        self.events = _Outbox(coordinator.EVENTS, "events", config["queue_limit"])
        # guards the outboxes (jobs, events): hook workers put, the htda-submit-send thread takes and gives back
        self._lock = threading.Lock()
        self._sizes = (SizeProbe(str(node.path(config["storage_root"])), clock=node.clock) if config["storage_root"]
                       else None)
        self._sender = Periodic("htda-submit-send", config["send_interval"], self.flush, self.log,
                                first_delay=config["send_interval"], clock=node.clock)
        self.rescheduler = Rescheduler(CondorTool(
            config["reschedule_command"], config["condor_config"], what="reschedule after routing",
            fallback="jobs wait for the negotiator's own cycle", log=self.log), clock=node.clock)
        self.queue = ScheddQueue(CondorTool(
            config["queue_command"] if config["first_read_home"] else [], config["condor_config"],
            what="reading the schedd's queue", fallback="homes count jobs until home_timeout instead", log=self.log))
        self._next_queue_read = 0.0  # monotonic; only the htda-submit-schedd thread reads and writes it
        self._schedd = Periodic("htda-submit-schedd", SCHEDD_TICK, self._talk_to_schedd, self.log, clock=node.clock)
        self._turn = itertools.count()
        m = node.metrics
        self._translated = m.counter("htda_submit_translate_total", "translate requests, by outcome", ("outcome",))
        self._hook_events = m.counter("htda_submit_events_total", "lifecycle hook calls, by hook and state",
                                      ("hook", "state"))
        self._invalid = m.counter("htda_submit_invalid_total", "jobs and events the coordinator would refuse "
                                  "(a field out of its limits): logged, not sent", ("kind",))
        self._sent = m.counter("htda_submit_sent_total", "jobs and events delivered to a coordinator", ("kind",))
        self._homed = m.counter("htda_submit_first_read_homes_total", "jobs whose inputs no node held, steered "
                                "to their first-read home, by node", ("node",))
        self._reschedules = m.counter("htda_submit_reschedules_total", "reschedule_command runs after steering "
                                      "jobs, by outcome", ("outcome",))
        self._queue_reads = m.counter("htda_submit_queue_reads_total", "queue_command runs, by outcome",
                                      ("outcome",))
        m.gauge("htda_submit_first_read_inputs", "inputs with a first-read home", callback=lambda: len(self.homes))
        m.gauge("htda_submit_routed_jobs", "jobs steered to a node and not yet finished (the load first-read "
                "homes are spread by)", callback=self.homes.jobs)
        m.gauge("htda_submit_queued", "jobs and events waiting for a coordinator", ("kind",),
                callback=lambda: {"jobs": len(self.jobs.items), "events": len(self.events.items)})
        m.gauge("htda_submit_dropped", "jobs and events dropped because the queue was full", ("kind",),
                callback=lambda: {"jobs": self.jobs.dropped, "events": self.events.dropped})

    # -- life cycle --------------------------------------------------------------
    def loops(self) -> list[Periodic]:
        return [self._sender, self._schedd]

    def start(self) -> None:
        self.channel.start()
        self._sender.start()
        self._schedd.start()

    def stop(self) -> None:
        self.channel.stop()
        self._sender.stop(timeout=5)
        self._schedd.stop(timeout=5)
        self.flush()  # one last try, so jobs routed just before shutdown are not lost

    # -- the hooks' channel -------------------------------------------------------------
    # No REST routes: hooks come through self.channel only, never a TCP port a user could take first.

    def trusts(self, uid: int) -> bool:
        """Root, or an account of ``trusted_users`` as the system names it now: an account made (or
        renumbered) after the agent started, as when HTCondor is installed later, counts at once."""
        return uid == 0 or any(_uid(name) == uid for name in self.config["trusted_users"])

    def _authorize(self, uid: int, ad: classads.ClassAd) -> None:
        """Refuse unless the caller ``uid`` owns the job (its ``Owner``) or is root or a trusted account."""
        if self.trusts(uid):
            return
        owner = classads.evaluate(ad, "Owner")
        if not isinstance(owner, str) or _uid(owner) != uid:
            raise Refused(f"uid {uid} may not act for a job of {str(owner)[:64]!r}")

    def _translate(self, call: Call) -> Answer:
        try:
            _, ad = parse_input(call.body)
        except (classads.AdError, UnicodeDecodeError) as exc:
            self._translated.inc(outcome="malformed")
            return Answer(f"malformed job ad: {exc}\n".encode(), 400)
        try:
            self._authorize(call.uid, ad)
        except Refused as exc:
            self._translated.inc(outcome="refused")
            self.log.warning("translate refused: %s", exc)
            raise
        home = self.first_read_home if self.config["first_read_home"] else None
        outcome = translate(ad, self.mapping, self.steering, self._queue_job, self.lookup, home)
        if home is not None and outcome.job is not None and outcome.preferred:
            self.homes.routed(outcome.job.job_id, outcome.preferred)  # it waits for those nodes' slots
        if outcome.changed:
            self.rescheduler.routed()
        self._translated.inc(outcome="steered" if outcome.changed else "unchanged")
        job = outcome.job.job_id if outcome.job else "?"
        (self.log.warning if outcome.failed else self.log.debug)("translate %s: %s", job, outcome.reason)
        return Answer(outcome.text, headers=[("X-HTDA-Outcome", "steered" if outcome.changed else "unchanged")])

    def _event(self, call: Call) -> Answer:
        hook = call.query.get("hook", "")
        if hook not in HOOKS:
            return Answer(f"query parameter 'hook' must be one of {', '.join(HOOKS)}\n".encode(), 400)
        try:
            ad = classads.parse_job(split(call.body)[1].decode("utf-8"))
        except (classads.AdError, UnicodeDecodeError) as exc:
            return Answer(f"malformed job ad: {exc}\n".encode(), 400)
        try:
            self._authorize(call.uid, ad)
        except Refused as exc:
            self._hook_events.inc(hook=hook, state="refused")
            self.log.warning("%s hook refused: %s", hook, exc)
            raise
        state, node = job_state(ad)
        job_id = job_ids(ad)[0]
        if self.config["first_read_home"]:
            self.homes.job_event(job_id, state, node)
        if state is not None:
            event = {"job_id": job_id, "state": state, "time": self.node.clock.time(),
                     "owner": job_owner(ad)}  # the coordinator counts it only for a job of this owner
            if node:
                event["node"] = node
            if self._fits(event, coordinator.Event, "events"):
                with self._lock:
                    self.events.put(event)
        self._hook_events.inc(hook=hook, state=state or "none")
        return Answer(json.dumps({"state": state}).encode())

    # -- the pool side -----------------------------------------------------------
    def _queue_job(self, job: JobInfo) -> None:
        item = job.to_json()
        if not self._fits(item, coordinator.Job, "jobs"):
            return
        with self._lock:
            self.jobs.put(item)
        if len(self.jobs.items) >= self.config["batch_size"]:
            self._sender.wake()

    def _fits(self, item: dict[str, Any], kind: type, what: str) -> bool:
        """Whether the coordinator will take ``item`` (checked with its own type): one it would refuse must not
        enter a batch, which the coordinator would refuse whole, again and again."""
        try:
            check_answer(item, kind, what[:-1])
        except ProtocolError as exc:
            self._invalid.inc(kind=what)
            self.log.warning("not sent to the coordinator: %s", exc)
            return False
        return True

    def _urls(self, configured: list[str], role: str) -> list[str]:
        return [u.rstrip("/") for u in configured] or [m.url for m in self.node.members(role) if m.url]

    def lookup(self, lfns: list[str]) -> Any:
        """Ask locators in turn (starting at a rotating one) until one answers or time runs out."""
        local = self.node.component("locator")
        if local is not None and self.config["local_locator"] and not self.config["locators"]:
            from ..locator.component import LocatorComponent  # loaded already: this node runs it

            if isinstance(local, LocatorComponent):
                return {"nodes": local.index.lookup(lfns).nodes}  # a co-located locator: no HTTP hop
        urls = self._urls(self.config["locators"], "locator")
        if not urls:
            raise ClientError("no locator known")
        deadline = self.node.clock.monotonic() + self.config["lookup_timeout"]
        start = next(self._turn) % len(urls)
        error: Exception = ClientError("no time left")
        for url in urls[start:] + urls[:start]:
            left = deadline - self.node.clock.monotonic()
            if left <= 0.005:
                break
            try:
                answer = LocatorClient(self.node.client, url).lookup(lfns, timeout=left, idempotent=True, retries=0)
                return to_wire(answer)
            except ClientError as exc:
                error = exc
        raise error

    def first_read_home(self, job: JobInfo) -> str | None:
        """The node to read ``job``'s inputs first (no node holds any of them): see :mod:`htda.condor.homes`."""
        nodes = [m.name for m in self.node.members("cache")
                 if (facts := facts_in(m.info, "cache", CacheFacts)) is not None and facts.capacity_bytes]
        home = self.homes.choose(job.inputs, nodes, job.job_id)
        if home is not None:
            self._homed.inc(node=home)
            if self.config["read_ahead"] and self.read_ahead.want(home, job.inputs):
                self._sender.wake()
        return home

    def _cache_url(self, name: str) -> str | None:
        return next((m.url for m in self.node.members("cache") if m.name == name and m.url), None)

    def _talk_to_schedd(self) -> None:
        """A reschedule when one is due; the queue of steered jobs for the homes every queue_interval, while
        jobs are counted (htda.condor.reschedule, htda.condor.queue)."""
        done = self.rescheduler.tick()
        if done is not None:
            self._reschedules.inc(outcome="ok" if done else "failed")
        now = self.node.clock.monotonic()
        if not self.queue.tool or now < self._next_queue_read or not self.homes.jobs():
            return
        self._next_queue_read = now + self.config["queue_interval"]
        queue = self.queue.read()
        self._queue_reads.inc(outcome="failed" if queue is None else "ok")
        if queue is not None:
            self.homes.reconcile(queue, asked_at=now)

    def flush(self) -> None:
        """Ask first-read homes to read ahead; send what is queued, in batches, to the first coordinator that
        takes it."""
        self.read_ahead.send()
        for outbox in (self.jobs, self.events):
            while outbox.items:
                with self._lock:
                    batch = outbox.take(self.config["batch_size"])
                if not self._deliver(outbox, batch):
                    with self._lock:
                        outbox.give_back(batch)
                    return

    def _deliver(self, outbox: _Outbox, batch: list[dict[str, Any]]) -> bool:
        if outbox is self.jobs and self._sizes is not None:
            self._sizes.annotate(batch)  # here, off the hooks' path: the sender thread can wait on storage
        for url in self._urls(self.config["coordinators"], "coordinator"):
            try:
                # the items stay the plain JSON the hooks made (the coordinator checks them with the same types)
                self.node.client.post(outbox.endpoint.url(url), {outbox.key: batch}, idempotent=True, retries=0)
            except ClientError as exc:
                self.log.debug("coordinator %s did not take %d %s: %s", url, len(batch), outbox.key, exc)
                continue
            self._sent.inc(len(batch), kind=outbox.key)
            return True
        self.log.warning("no coordinator took %d %s; kept for the next try", len(batch), outbox.key)
        return False


def _uid(user: str) -> int | None:
    """The uid of account ``user``; None when there is no such account."""
    try:
        return pwd.getpwnam(user).pw_uid
    except (KeyError, OSError):
        return None

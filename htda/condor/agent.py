"""The submit agent: the node component the job-router hooks talk to on the submit host.

The hooks run as the job's owner, so they must not hold the pool secret.  They
post their standard input, unsigned, to this component on the same host (only
loopback, or ``allow_networks``, is accepted).  The agent, a pool member with
the secret, parses the ad with HTCondor's code, asks a locator, answers the
rewritten ad, and queues jobs and state changes for the coordinator, sent in
batches by a background thread so no hook waits for the coordinator.
"""

from __future__ import annotations

import collections
import ipaddress
import itertools
import threading
import time
from typing import Any

from ..node.client import ClientError
from ..node.component import Component
from ..node.config import Field, ListOf, Section, positive
from ..node.periodic import Periodic
from ..node.rest import API, HTTPError, Request, Response, Route
from . import classads
from .hooks import split
from .jobinfo import InputMapping, JobInfo, job_ids, job_state
from .sizes import SizeProbe
from .translate import Steering, translate

__all__ = ["SubmitAgent"]

BASE = f"{API}/submit"
HOOKS = ("update", "finalize", "cleanup")


class _Outbox:
    """A bounded queue of JSON items sent in batches to the first coordinator that answers."""

    def __init__(self, path: str, key: str, limit: int):
        self.path, self.key, self.limit = path, key, limit
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
        "allow_networks": Field(list, lambda: ["127.0.0.0/8", "::1/128"],
                                "networks whose unsigned hook requests are served (keep it to loopback)"),
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
        "min_fraction": Field(float, 0.0, "nodes holding no more than this share of the bytes are not preferred"),
        "steer_requirements": Field(bool, False, "also require a preferred node (Requirements untouched if false)"),
        "steer_timeout": Field(float, 600.0, "with steer_requirements: seconds after submission (QDate) a job "
                                             "stops waiting for a preferred node (0: it waits for ever)"),
        "storage_root": Field(str, "", "a local view of storage (NFS or xrootdfs mount) where the agent reads "
                                       "input sizes for the coordinator; empty: no sizes are sent"),
        "max_ad_bytes": Field(int, 1024 * 1024, "largest ad accepted from a hook", check=positive),
        "send_interval": Field(float, 0.2, "seconds between batches to the coordinator", check=positive),
        "batch_size": Field(int, 1000, "jobs or events per batch", check=positive),
        "queue_limit": Field(int, 100_000, "jobs or events kept while no coordinator answers", check=positive),
    })

    def __init__(self, node, config: dict[str, Any]):
        super().__init__(node, config)
        self.allowed = [ipaddress.ip_network(n, strict=False) for n in config["allow_networks"]]
        self.mapping = InputMapping(config["input_attribute"], {p["prefix"]: p["lfn"] for p in config["lfn_prefixes"]})
        self.steering = Steering(config["rank_scale"], config["max_preferred"], config["min_fraction"],
                                 config["steer_requirements"], config["steer_timeout"])
        self.jobs = _Outbox(f"{API}/coordinator/jobs", "jobs", config["queue_limit"])
        self.events = _Outbox(f"{API}/coordinator/events", "events", config["queue_limit"])
        self._lock = threading.Lock()
        self._sizes = SizeProbe(str(node.path(config["storage_root"]))) if config["storage_root"] else None
        self._sender = Periodic("htda-submit-send", config["send_interval"], self.flush, self.log,
                                first_delay=config["send_interval"])
        self._turn = itertools.count()
        m = node.metrics
        self._translated = m.counter("htda_submit_translate_total", "translate requests, by outcome", ("outcome",))
        self._hook_events = m.counter("htda_submit_events_total", "lifecycle hook calls, by hook and state",
                                      ("hook", "state"))
        self._sent = m.counter("htda_submit_sent_total", "jobs and events delivered to a coordinator", ("kind",))
        m.gauge("htda_submit_queued", "jobs and events waiting for a coordinator", ("kind",),
                callback=lambda: {"jobs": len(self.jobs.items), "events": len(self.events.items)})
        m.gauge("htda_submit_dropped", "jobs and events dropped because the queue was full", ("kind",),
                callback=lambda: {"jobs": self.jobs.dropped, "events": self.events.dropped})

    # -- life cycle --------------------------------------------------------------
    def start(self) -> None:
        self._sender.start()

    def stop(self) -> None:
        self._sender.stop(timeout=5)
        self.flush()  # one last try, so jobs routed just before shutdown are not lost

    # -- REST --------------------------------------------------------------------
    def routes(self) -> list[Route]:
        limit = self.config["max_ad_bytes"]
        # access="public" on purpose: hooks run as users and hold no secret; _local() admits
        # only allow_networks (loopback by default), whatever pool.read_networks says.
        return [
            Route("POST", f"{BASE}/translate", self._translate, "a translate hook's stdin; answers the new job ad",
                  access="public", tag="submit", max_body=limit, content_type="text/plain"),
            Route("POST", f"{BASE}/events", self._event, "a lifecycle hook's job ad (query: hook)",
                  query={"hook": "update, finalize or cleanup"}, access="public", tag="submit", max_body=limit,
                  content_type="text/plain"),
        ]

    def _local(self, request: Request) -> None:
        try:
            addr = ipaddress.ip_address(request.remote)
        except ValueError:
            addr = None
        if addr is None or not any(addr in net for net in self.allowed):
            raise HTTPError(403, "hook requests are served only from this host (submit.allow_networks)")

    def _translate(self, request: Request) -> Response:
        self._local(request)
        outcome = translate(request.body, self.mapping, self.steering, self._queue_job, self.lookup)
        self._translated.inc(outcome="steered" if outcome.changed else "unchanged")
        job = outcome.job.job_id if outcome.job else "?"
        (self.log.warning if outcome.failed else self.log.debug)("translate %s: %s", job, outcome.reason)
        return Response(outcome.text, content_type="text/plain; charset=utf-8",
                        headers=[("X-HTDA-Outcome", "steered" if outcome.changed else "unchanged")])

    def _event(self, request: Request) -> dict[str, Any]:
        hook = request.query.get("hook", "")
        if hook not in HOOKS:
            raise HTTPError(400, f"query parameter 'hook' must be one of {', '.join(HOOKS)}")
        self._local(request)
        try:
            ad = classads.parse_job(split(request.body)[1].decode("utf-8"))
        except (classads.AdError, UnicodeDecodeError) as exc:
            raise HTTPError(400, f"malformed job ad: {exc}") from None
        state, node = job_state(ad)
        if state is not None:
            event = {"job_id": job_ids(ad)[0], "state": state, "time": time.time()}
            if node:
                event["node"] = node
            with self._lock:
                self.events.put(event)
        self._hook_events.inc(hook=hook, state=state or "none")
        return {"state": state}

    # -- the pool side -----------------------------------------------------------
    def _queue_job(self, job: JobInfo) -> None:
        with self._lock:
            self.jobs.put(job.to_json())
        if len(self.jobs.items) >= self.config["batch_size"]:
            self._sender.wake()

    def _urls(self, configured: list[str], role: str) -> list[str]:
        return [u.rstrip("/") for u in configured] or [m.url for m in self.node.members(role) if m.url]

    def lookup(self, lfns: list[str]) -> Any:
        """Ask locators in turn (starting at a rotating one) until one answers or time runs out."""
        local = self.node.components.get("locator")
        if local is not None and self.config["local_locator"] and not self.config["locators"]:
            return {"nodes": local.index.lookup(lfns).nodes}  # a co-located locator: no HTTP hop
        urls = self._urls(self.config["locators"], "locator")
        if not urls:
            raise ClientError("no locator known")
        deadline = time.monotonic() + self.config["lookup_timeout"]
        start = next(self._turn) % len(urls)
        error: Exception = ClientError("no time left")
        for url in urls[start:] + urls[:start]:
            left = deadline - time.monotonic()
            if left <= 0.005:
                break
            try:
                return self.node.client.post(f"{url}{API}/locator/lookup", {"lfns": lfns}, timeout=left,
                                             idempotent=True, retries=0)
            except ClientError as exc:
                error = exc
        raise error

    def flush(self) -> None:
        """Send what is queued, in batches, to the first coordinator that takes it."""
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
                self.node.client.post(url + outbox.path, {outbox.key: batch}, idempotent=True, retries=0)
            except ClientError as exc:
                self.log.debug("coordinator %s did not take %d %s: %s", url, len(batch), outbox.key, exc)
                continue
            self._sent.inc(len(batch), kind=outbox.key)
            return True
        self.log.warning("no coordinator took %d %s; kept for the next try", len(batch), outbox.key)
        return False

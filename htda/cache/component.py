"""The cache component: config, plugins, the cycle thread and the admin endpoints.

See docs/cache.rst.  The work itself is in :mod:`htda.cache.service`.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
from collections.abc import Sequence
from typing import Any

from ..lfn import normalize_lfn
from ..node import plugins
from ..node.client import ClientError
from ..node.component import Component
from ..node.config import (
    REQUIRED,
    ConfigError,
    Field,
    ListOf,
    Section,
    fraction,
    non_negative,
    one_of,
    plugin_of,
    positive,
)
from ..node.periodic import Periodic
from ..node.rest import HTTPError, Request, Response, Route
from ..protocol import cache as proto
from ..protocol.base import to_wire
from ..protocol.clients import CoordinatorClient
from ..protocol.locator import Holding
from .allocation import holdable
from .backends.base import CacheDevice, StorageBackend
from .backends.logical import LogicalDevice
from .checksum import KINDS
from .groups import HeldGroups
from .ownership import RemoteRule, account_id, parse_mode
from .peers import MAX_RANGE, PEER_CHUNK, PeerSource, serve_range
from .readahead import ReadAhead
from .reporting import HoldingsReporter
from .service import Assignment, CacheService, Marks
from .staging import Stager
from .union.base import UnionDriver

__all__ = ["CacheComponent"]

#: seconds between scans for files the worker's jobs read from storage, and the life of a report
READS_INTERVAL, READS_TTL = 1.0, 30.0

STORAGE_GROUP, DEVICE_GROUP, UNION_GROUP = "htda.storage", "htda.cachedev", "htda.union"
#: URL schemes of per-file ``source`` locations and the storage plugin that serves each
SOURCE_SCHEMES = {"root": "xrootd", "xroot": "xrootd", "http": "http", "https": "http"}


def _marks_in_order(device: dict[str, Any]) -> str | None:
    if device["low_watermark"] > device["high_watermark"]:
        return (f"low_watermark {device['low_watermark']} is above high_watermark {device['high_watermark']}: "
                f"eviction would stop above the mark that starts it")
    return None


def _account(group: bool):
    def check(value: str) -> str | None:
        try:
            account_id(value, group)
        except KeyError:
            return f"names no {'group' if group else 'user'} on this host ({value!r}; a name or a number)"
        return None

    return check


def _mode(value: str) -> str | None:
    try:
        parse_mode(value)
    except ValueError as exc:
        return f"must be an octal mode: {exc}"
    return None


DEVICE = Section({
    "path": Field(str, REQUIRED, "directory of the device (relative: to the config file)"),
    "backend": Field(str, "posix", "cache-device plugin (htda.cachedev); the logical one is made by the node",
                     check=plugin_of(DEVICE_GROUP, exclude=("logical",))),
    "capacity": Field(int, 0, "bytes this device may hold (0: its whole file system)", check=non_negative),
    "high_watermark": Field(float, 0.95, "fill the device up to this fraction of its capacity", check=fraction),
    "low_watermark": Field(float, 0.90, "once above the high mark, evict down to this fraction", check=fraction),
}, check=_marks_in_order)

SCHEMA = Section({
    "storage": Field(str, "posix", "default storage plugin (htda.storage): posix, xrootd, http",
                     check=plugin_of(STORAGE_GROUP)),
    "storage_location": Field(str, "", "its root: a directory, root://host:port//path or https://host/path"),
    "storage_timeout": Field(float, 30.0, "seconds per storage request before it counts as failed", check=positive),
    "peer_mtime_check": Field(bool, True, "refuse a peer's copy whose source mtime differs from this node's view of "
                                          "storage (sizes and checksums are always compared); false where each "
                                          "worker reads storage through a caching proxy of its own, whose mtimes "
                                          "differ from node to node (docs/cache.rst, Copies from peers)"),
    "storage_mtime_check": Field(bool, True, "a file of the default storage whose mtime changes is a new version "
                                             "(its copies are refreshed, a copy in progress fails); false where "
                                             "the worker reads storage through a caching proxy, which gives a file "
                                             "the time it cached it as mtime: sizes and checksums still count "
                                             "(docs/cache.rst, Read-through workers)"),
    "storage_ca_file": Field(str, "", "CA bundle for https:// storage"),
    "read_ahead": Field(bool, False, "read the files the submit agent names (the inputs of jobs it sends here "
                                     "to read first) through the default storage as soon as it routes them, "
                                     "so that they are on this worker when the jobs start; only where that "
                                     "storage is a read-through cache on the worker (docs/cache.rst, "
                                     "Read-through workers): elsewhere it would read storage twice"),
    "devices": Field(ListOf(DEVICE), list, "cache devices, e.g. [{path = \"../var/cache0\"}]"),
    "union": Field(str, "mergerfs", "union-view driver (htda.union): mergerfs, overlayfs, symlink",
                   check=plugin_of(UNION_GROUP)),
    "view": Field(str, "", "where jobs read the union view ('' = no view)"),
    "view_storage": Field(str, "", "POSIX path of storage in the view (default: a posix storage's root)"),
    "view_options": Field(str, "", "driver options as key=value pairs separated by ';'"),
    "cycle": Field(float, 10.0, "seconds between assignment pulls", check=positive),
    "coordinators": Field(list, list, "coordinator URLs to pull from besides the pool's coordinator members"),
    "locators": Field(list, list, "locator URLs to report to besides the pool's locator members"),
    "holdings_interval": Field(float, 60.0, "seconds between complete holdings reports", check=positive),
    "max_staging": Field(int, 2, "copies in flight at once", check=positive),
    "report_reads": Field(bool, True, "tell the coordinator which files this worker's jobs read from storage, "
                                      "so their copies wait until the reading stops (fanotify on the view)"),
    "buffer_size": Field(int, 8 << 20, "copy buffer in bytes", check=positive),
    "checksum": Field(str, "adler32", "checksum of copies: " + ", ".join(KINDS), check=one_of(*KINDS)),
    "readback": Field(bool, True, "read each copy back from the device and compare checksums"),
    "verify_root": Field(bool, True, "open staged .root files with uproot and list their keys"),
    "verify_on_start": Field(str, "size", "start-up check of found copies: size (size+mtime+source) or checksum",
                             check=one_of("size", "checksum")),
    "revalidate_interval": Field(float, 600.0, "seconds before a copy is checked against its source again",
                                 check=non_negative),
    "revalidate_per_cycle": Field(int, 32, "copies re-checked per cycle", check=non_negative),
    "scrub_bytes_per_cycle": Field(int, 256 << 20, "bytes of copies whose checksum is re-verified per cycle",
                                   check=non_negative),
    "max_attempts": Field(int, 3, "failed copies of a file before it is released", check=positive),
    "retry_delay": Field(float, 30.0, "seconds before a failed copy is retried (doubles each time)",
                         check=non_negative),
    "release_interval": Field(float, 300.0, "seconds before the same file is released again", check=non_negative),
    # copies of POSIX files keep their source's owner, group and mode; XRootD and HTTP files have none here
    "remote_owner": Field(str, "root", "owner of copies of xrootd/http files (a user name or uid)",
                          check=_account(group=False)),
    "remote_group": Field(str, "root", "group of copies of xrootd/http files (a group name or gid)",
                          check=_account(group=True)),
    "remote_file_mode": Field(str, "0600", "mode of copies of xrootd/http files (write bits are dropped)",
                              check=_mode),
    "remote_dir_mode": Field(str, "0700", "mode of the directories of copies of xrootd/http files", check=_mode),
    "listings_unsigned": Field(bool, False, "serve the listings of copies (files, staging, evictions) unsigned "
                                            "to pool.read_networks too; they must not include this worker's "
                                            "own addresses, where jobs run"),
})


def _host_addresses() -> list[str]:
    """This host's addresses by its name (where a job on it may connect from, besides loopback)."""
    try:
        # an address is a str; typeshed allows an int too, for a Python built without IPv6
        return sorted({str(info[4][0]) for info in socket.getaddrinfo(socket.gethostname(), None)})
    except OSError:
        return []


def _normalized(values: Sequence[str], field: str = "body.lfns") -> list[str]:
    """The LFNs of a request body's list ``field``; :class:`HTTPError` 400 naming the field and the first bad
    one."""
    lfns = []
    for value in values:
        try:
            lfns.append(normalize_lfn(value))
        except ValueError as exc:
            raise HTTPError(400, f"{field}: {value[:200]!r}: {exc}") from None
    return lfns


def _within(addr: str, net: ipaddress.IPv4Network | ipaddress.IPv6Network) -> bool:
    try:
        return ipaddress.ip_address(addr) in net
    except ValueError:  # a host name to listen on: not an address to compare
        return False


# Answers of the example all-in-one node for the REST reference: one copy held, one file its storage lacks.
_DEVICE_PATH, _STORAGE = "/opt/htda/var/all-in-one/cache0", "/opt/htda/var/storage"
FILES_EXAMPLE = {"node": "all-in-one", "total": 1, "files": [{
    "lfn": "/store/demo/dataset1/events_001.root", "size": 22277, "mtime": 1795642838.952, "device": _DEVICE_PATH,
    "checksum": "dc7504e7", "checksum_kind": "adler32", "score": 0.99996, "source": f"posix:{_STORAGE}",
    "staged_at": 1795642840.436, "checked_at": 1795642840.441}]}
DEVICES_EXAMPLE = {"devices": [{
    "path": _DEVICE_PATH, "backend": "posix", "capacity_bytes": 65458339129, "used_bytes": 44549,
    "free_bytes": 65458294580, "filesystem_bytes": 270553174016, "filesystem_free_bytes": 78985953280,
    "high_watermark": 0.95, "low_watermark": 0.9, "files": 2}]}
_MISSING = "/store/demo/dataset2/events_001.root"
_NOT_IN_STORAGE = f"{_MISSING}: no such file in storage {_STORAGE}"
STAGING_EXAMPLE = {
    "max_staging": 2, "active": [], "queued": [],
    "failed": [{"lfn": _MISSING, "attempt": 1, "error": _NOT_IN_STORAGE, "permanent": True, "time": 1795642844.385}],
    "retrying": {_MISSING: {"count": 1, "retry_at": 1795644764.385, "error": _NOT_IN_STORAGE, "permanent": True}}}


class CacheComponent(Component):
    """Keeps validated copies of assigned files on local devices and serves them through a union view."""

    name = "cache"
    config_schema = SCHEMA

    def __init__(self, node, config: dict[str, Any]):
        super().__init__(node, config)
        self._storages: dict[str | None, StorageBackend] = {}
        self._storage_lock = threading.Lock()  # guards _storages: backends for per-file sources, made on first use
        self.remote_rule = RemoteRule(account_id(config["remote_owner"]), account_id(config["remote_group"], True),
                                      parse_mode(config["remote_file_mode"]), parse_mode(config["remote_dir_mode"]))
        self._check_listings(node)
        try:
            self.default_storage = self._make_storage(config["storage"], self._location(config["storage_location"]),
                                                      mtime_stable=config["storage_mtime_check"])
        except ValueError as exc:
            raise ConfigError(f"{node.source}: 'cache.storage_location': {exc}") from None
        members: list[CacheDevice] = []
        marks: dict[int, Marks] = {}
        for spec in config["devices"]:
            dev = plugins.load(DEVICE_GROUP, spec["backend"])(str(node.path(spec["path"])),
                                                              {"capacity": spec["capacity"]})
            members.append(dev)
            marks[id(dev)] = Marks(spec["high_watermark"], spec["low_watermark"])
        if not members:
            default = plugins.load(DEVICE_GROUP, "posix")(str(node.data_dir / "cache"), {})
            members.append(default)
            marks[id(default)] = Marks(0.95, 0.90)
        self.device = LogicalDevice(members)
        stager = Stager(config["checksum"], config["verify_root"], config["readback"], config["buffer_size"],
                        clock=node.clock)
        self.reporter = HoldingsReporter(node.name, node.client, self._locators, self._holdings,
                                         config["holdings_interval"], clock=node.clock)
        self.service = CacheService(self.device, marks, self.storage_for, stager, self.reporter, self._make_view(),
                                    config, node.metrics, self.peer_sources, clock=node.clock)
        self.read_ahead = ReadAhead(lambda: self.default_storage, self._busy,
                                    lambda: self.service.reading, self.log, node.metrics,
                                    clock=node.clock)
        self.m_peer_served = node.metrics.counter("htda_cache_peer_served_bytes_total", "bytes of this node's "
                                                  "copies served to other cache nodes copying them")
        self.cycles = 0
        self.groups = HeldGroups(node.clock)
        self._reported_reads: list[str] = []
        self._reads_due = 0.0
        self.last_cycle: dict[str, Any] = {}
        # One cycle at a time (the htda-cache-cycle thread, POST /cycle) and no admin eviction during one (see
        # _evict); guards cycles, last_cycle and the service's planning state (its releases, _sizes,
        # _last_assigned, the entries' scores, the revalidator's checks).
        self._cycle_lock = threading.Lock()
        self._reads_started = False
        self._loop = Periodic("htda-cache-cycle", config["cycle"], self.run_cycle, self.log, clock=node.clock)
        # reads are scanned more often than the cycle: a copy elsewhere should learn of them soon
        self._reads_loop = Periodic("htda-cache-reads", min(config["cycle"], READS_INTERVAL), self._report_reads,
                                    self.log, clock=node.clock)

    def _check_listings(self, node) -> None:
        """Unsigned listings only to networks without this worker: its jobs reach it from loopback and from
        the address it listens on."""
        if not self.config["listings_unsigned"]:
            return
        own = ["127.0.0.1", "::1", node.config["node"]["listen"].rpartition(":")[0].strip("[]"), *_host_addresses()]
        for text in node.config["pool"]["read_networks"]:
            net = ipaddress.ip_network(text, strict=False)
            for addr in own:
                if _within(addr, net):
                    raise ConfigError(f"{node.source}: 'cache.listings_unsigned' would let jobs on this worker "
                                      f"list its copies: pool.read_networks {text} includes {addr}")

    # -- plugins -----------------------------------------------------------------
    def _location(self, value: str) -> str:
        return value if "://" in value or not value else str(self.node.path(value))

    def _make_storage(self, plugin: str, location: str, mtime_stable: bool = True) -> StorageBackend:
        options = {"timeout": self.config["storage_timeout"], "stall_timeout": self.config["storage_timeout"],
                   "low_speed_time": self.config["storage_timeout"], "remote_rule": self.remote_rule,
                   "mtime_stable": mtime_stable}
        if self.config["storage_ca_file"]:
            options["ca_file"] = str(self.node.path(self.config["storage_ca_file"]))
        return plugins.load(STORAGE_GROUP, plugin)(location or str(self.node.data_dir / "storage"), options)

    def storage_for(self, source: str | None) -> StorageBackend:
        """The default storage, or a backend for a per-file ``source`` URL (root://, http(s)://)."""
        if not source:
            return self.default_storage
        with self._storage_lock:
            if source not in self._storages:
                scheme = source.split("://", 1)[0] if "://" in source else ""
                if scheme not in SOURCE_SCHEMES:
                    raise ValueError(f"unsupported source {source!r}: use root://, http:// or https://")
                self._storages[source] = self._make_storage(SOURCE_SCHEMES[scheme], source)
            return self._storages[source]

    def _make_view(self) -> UnionDriver | None:
        if not self.config["view"]:
            return None
        storage = self.config["view_storage"] and str(self.node.path(self.config["view_storage"]))
        cls = plugins.load(UNION_GROUP, self.config["union"])
        options = dict(p.split("=", 1) for p in self.config["view_options"].split(";") if "=" in p)
        return cls(str(self.node.path(self.config["view"])), self.device.branches(),
                   storage or self.default_storage.local_root(), str(self.node.data_dir), options,
                   clock=self.node.clock)

    # -- life cycle ------------------------------------------------------------------
    def loops(self) -> list[Periodic]:
        return [self._loop, self.reporter.loop, *([self._reads_loop] if self._reads_started else []),
                *(self.read_ahead.loops() if self.config["read_ahead"] else [])]

    def start(self) -> None:
        self.recovered = self.service.recover()
        self.reporter.start()
        self._loop.start()
        if self.config["read_ahead"]:
            self.read_ahead.start()
        self._reads_started = bool(self.config["report_reads"] and self.service.view is not None)
        if self._reads_started:
            self._reads_loop.start()

    def stop(self) -> None:
        self.read_ahead.stop()
        self._reads_loop.stop()
        self._loop.stop()
        self.service.shutdown()
        self.reporter.stop()

    def on_member_joined(self, member) -> None:
        if "locator" in member.roles:
            self.reporter.request_full()
        if "coordinator" in member.roles:
            self._loop.wake()

    def run_cycle(self) -> dict[str, Any]:
        """One pass: pull, plan, evict, stage, revalidate, refresh the view."""
        with self._cycle_lock:
            assignment = self._pull()
            result: dict[str, Any] = {"coordinator": assignment.coordinator if assignment else None}
            if assignment is not None:
                result.update(self.service.apply(assignment))
                self.groups.assigned(assignment.files, assignment.groups)
            self.groups.refresh(self.service.index.__contains__)
            result["revalidated_dropped"] = self.service.revalidate_some()
            self.service.refresh_view()
            self.cycles += 1
            result["cycle"] = self.cycles
            self.last_cycle = result
            return result

    def _peers(self, role: str) -> list[str]:
        """URLs of the pool's members with ``role``, then those configured in ``<role>s``, each once."""
        urls = [m.url for m in self.node.members(role)] + list(self.config[f"{role}s"])
        return list(dict.fromkeys(urls))

    def _coordinators(self) -> list[str]:
        return self._peers("coordinator")

    def _report_reads(self) -> None:
        """Send the files this worker's jobs read from storage when they change (and again before the last
        report expires); an empty report once the reading stopped."""
        reading = self.service.storage_reads()
        if reading == self._reported_reads and (not reading or self.node.clock.monotonic() < self._reads_due):
            return
        sent = False
        for url in self._coordinators():
            try:
                CoordinatorClient(self.node.client, url).reads(self.node.name, reading, READS_TTL, idempotent=True)
                sent = True
            except ClientError as exc:
                self.log.info("reporting storage reads to %s failed: %s", url, exc)
        if sent:
            self._reported_reads, self._reads_due = reading, self.node.clock.monotonic() + READS_TTL / 3

    def _pull(self) -> Assignment | None:
        for url in self._coordinators():
            try:
                answer = CoordinatorClient(self.node.client, url).assignments(self.node.name)
                return Assignment(answer.files, answer.draining, url, answer.cycle, answer.groups)
            except (ClientError, KeyError, TypeError, ValueError) as exc:
                self.log.info("no assignment from %s: %s", url, exc)
        return None

    def _locators(self) -> list[str]:
        return self._peers("locator")

    def peer_sources(self, names: Sequence[str]) -> list[PeerSource]:
        """The named pool members that run a cache, as sources to copy from, in the order named; this node
        and names not in the pool (or not caches) are skipped."""
        members = {m.name: m for m in self.node.members("cache")}
        chunk = min(self.config["buffer_size"], PEER_CHUNK)
        return [PeerSource(name, members[name].url, self.node.client, chunk=chunk,
                           timeout=self.config["storage_timeout"], check_mtime=self.config["peer_mtime_check"])
                for name in dict.fromkeys(names) if name != self.node.name and name in members]

    def _holdings(self) -> list[Holding]:
        return [Holding(lfn=e.lfn, size=e.size) for e in self.service.index.entries()]

    # -- reports ---------------------------------------------------------------------
    def heartbeat_info(self) -> dict[str, Any]:
        rooms = self.service.rooms()
        limits = holdable(rooms)  # what this node can hold now, under its high marks, each file system once
        free = sum(max(0, h - r.used) for h, r in zip(limits, rooms))
        groups, changed = self.groups.state
        return to_wire(proto.CacheHeartbeat(used_bytes=self.service.index.used_bytes(), free_bytes=free,
                                            capacity_bytes=sum(limits), files=len(self.service.index),
                                            staging=len(self.service.jobs), groups=list(groups),
                                            groups_changed=changed))

    # -- admin -----------------------------------------------------------------------
    def routes(self) -> list[Route]:
        page = {"limit": "at most this many entries (default 1000)", "offset": "skip this many entries"}
        # listings name users' files: signed only (loopback, open to pool.read_networks by default, is the jobs')
        listing = "read" if self.config["listings_unsigned"] else "auth"
        return [
            Route.of(proto.FILES, self._files, "copies this node holds", query=page, tag="cache", access=listing,
                     example=FILES_EXAMPLE),
            Route.of(proto.DEVICES, self._devices, "usage of each cache device", tag="cache",
                     example=DEVICES_EXAMPLE),
            Route.of(proto.STAGING, self._staging, "staging queue, progress and recent failures", tag="cache",
                     access=listing, example=STAGING_EXAMPLE),
            Route.of(proto.EVICTIONS, self._evictions, "recently removed copies and why", tag="cache",
                     access=listing),
            Route.of(proto.VIEW, self._view, "the union view: driver, path, branches, state", tag="cache"),
            Route.of(proto.COPIES, self._copy_range,
                  f"bytes of a copy held here, for a cache node copying it (pool members only): one range of at "
                  f"most {MAX_RANGE} bytes; X-HTDA-Size, X-HTDA-Mtime, X-HTDA-Checksum-Kind and X-HTDA-Checksum "
                  f"name the copy", tag="cache", access="auth", content_type="application/octet-stream",
                  headers={"Range": f"one 'bytes=first-last' (or 'first-', or '-count'), cut to {MAX_RANGE} bytes"},
                  statuses={206: "the bytes of the range asked for (Content-Range says which)",
                            416: "a range outside the copy, several ranges, or no Range for a copy too large to "
                                 "send whole"}),
            Route.of(proto.CYCLE, self._cycle_now, "run an assignment cycle now", tag="cache"),
            Route.of(proto.EVICT, self._evict, "drop copies now and give the files back to the coordinator",
                     tag="cache"),
            Route.of(proto.READ_AHEAD, self._read_ahead, "read files through storage before the jobs that will "
                     "read them here start (the submit agent asks; only with read_ahead on)", tag="cache",
                     statuses={409: "read_ahead is off on this node"}),
        ]

    def _files(self, request: Request) -> proto.CacheFiles:
        limit, offset = request.query_int("limit", 1000, 1, 100_000), request.query_int("offset", 0)
        entries = sorted(self.service.index.entries(), key=lambda e: (-e.score, e.lfn))
        return proto.CacheFiles(node=self.node.name, total=len(entries),
                                files=[proto.Copy(**e.to_json()) for e in entries[offset:offset + limit]])

    def _devices(self, request: Request) -> proto.Devices:
        rooms = self.service.rooms()
        entries = self.service.index.entries()
        return proto.Devices(devices=[
            proto.Device(path=r.device.path, backend=r.device.name, capacity_bytes=limit, used_bytes=r.used,
                         free_bytes=max(0, limit - r.used), filesystem_bytes=r.device.filesystem_bytes(),
                         filesystem_free_bytes=r.free, high_watermark=r.high, low_watermark=r.low,
                         files=sum(1 for e in entries if e.device is r.device))
            for r, limit in zip(rooms, holdable(rooms))])

    def _staging(self, request: Request) -> proto.Staging:
        jobs = [proto.StagingCopy(**j.to_json()) for j in list(self.service.jobs.values())]
        index = self.service.index
        # recent failures of files still not held (the latest per file): one copied since is no failure
        failed = {f["lfn"]: proto.StagingFailure(**f) for f in list(self.service.failures.recent)
                  if f["lfn"] not in index}
        return proto.Staging(max_staging=self.config["max_staging"], active=[j for j in jobs if j.state != "queued"],
                             queued=[j for j in jobs if j.state == "queued"], failed=list(failed.values()),
                             retrying={k: proto.Retry(count=f.count, retry_at=f.retry_at, error=f.error,
                                                      permanent=f.permanent)
                                       for k, f in self.service.failures.items()})

    def _evictions(self, request: Request) -> proto.Evictions:
        return proto.Evictions(evictions=[proto.Eviction(**e) for e in reversed(self.service.evictions)])

    def _view(self, request: Request) -> proto.ViewInfo:
        view = self.service.view
        if view is None:
            return proto.ViewInfo(driver=None)
        return proto.ViewInfo(**view.describe(), error=self.service.view_error)

    def _copy_range(self, request: Request) -> Response:
        try:
            lfn = normalize_lfn(request.params["lfn"])
        except ValueError as exc:
            raise HTTPError(400, f"path: {exc}") from None
        answer = serve_range(self.service.index.get(lfn), lfn, request.headers.get("range", ""))
        if request.method == "GET":
            self.m_peer_served.inc(len(answer.body))
        return answer

    def _evict(self, request: Request) -> proto.EvictAnswer:
        lfns = _normalized(request.data.lfns)
        coordinators = [m.url for m in self.node.members("coordinator")] + list(self.config["coordinators"])
        # Under the cycle's lock: a cycle running meanwhile could stage a file again just after it was evicted
        # (its assignment read before the file was held back), plan with a copy being removed, or evict the
        # same copy a second time (twice in the evictions and metrics).  So the eviction waits for the cycle.
        with self._cycle_lock:
            evicted = self.service.evict_on_request(lfns, coordinators[0] if coordinators else None)
        return proto.EvictAnswer(evicted=evicted, not_held=[lfn for lfn in lfns if lfn not in evicted])

    def _busy(self, lfn: str) -> bool:
        """Held here or being copied: a copy reads the file through the same read-through cache anyway."""
        return lfn in self.service.index or lfn in self.service.jobs

    def _read_ahead(self, request: Request) -> proto.ReadAheadAnswer:
        # a malformed body is a 400 either way
        jobs = [_normalized(job, f"body.jobs[{i}]") for i, job in enumerate(request.data.jobs)]
        if not self.config["read_ahead"]:
            raise HTTPError(409, "read_ahead is off on this node: its storage is not a read-through cache "
                                 "of its own (docs/cache.rst)")
        return proto.ReadAheadAnswer(queued=self.read_ahead.ask(jobs))

    def _cycle_now(self, request: Request) -> proto.CacheCycle:
        request.data  # noqa: B018 - validates the (empty) body
        if self._loop.stopping:
            raise HTTPError(503, "the cache is stopping")
        started = self.node.clock.monotonic()
        result = self.run_cycle()
        return proto.CacheCycle(**result, seconds=round(self.node.clock.monotonic() - started, 3))

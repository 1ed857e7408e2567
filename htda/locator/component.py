"""The locator component: answers "which nodes hold these files?" from what cache nodes report."""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

from ..lfn import normalize_lfn
from ..node.component import Component
from ..node.config import Field, Section, positive
from ..node.metrics import Counter
from ..node.periodic import Periodic
from ..node.rest import HTTPError, Request, Response, Route
from ..protocol import locator as proto
from ..protocol.base import to_wire, unset_or
from .index import HoldingsIndex

if TYPE_CHECKING:
    from ..node.pool import Member

__all__ = ["LocatorComponent"]

BASE = proto.BASE

# Answers for the REST reference: one dataset file held by the all-in-one node, another held nowhere.
LOOKUP_EXAMPLE = {"files": {"/store/demo/dataset1/events_001.root": ["all-in-one"],
                            "/store/demo/dataset2/events_001.root": []},
                  "nodes": {"all-in-one": {"files": 1, "bytes": 22277, "fraction": 0.5}}}
FILE_EXAMPLE = {"lfn": "/store/demo/dataset1/events_001.root", "nodes": {"all-in-one": 22277}}
NODES_EXAMPLE = {"nodes": {"all-in-one": {"files": 2, "bytes": 44549, "updated": 1795642844.274}}}
HOLDINGS_EXAMPLE = {"files": 2}

class LocatorComponent(Component):
    """In-memory index LFN -> holders, filled by cache nodes' holdings reports.

    Entries of a node vanish as soon as this node's pool view drops it, and a
    sweeper drops reports from nodes that never became (or stopped being)
    pool members within ``unknown_grace`` seconds.
    """

    name = "locator"
    config_schema = Section({
        "max_lookup": Field(int, 100_000, "most LFNs in one lookup request", check=positive),
        "sweep_interval": Field(float, 5.0, "seconds between sweeps for nodes that are not pool members",
                                check=positive),
        "unknown_grace": Field(float, 0.0, "seconds a node that is not a pool member keeps its entries "
                                           "(0: the pool expiry)"),
    })

    def __init__(self, node, config: dict[str, Any]):
        super().__init__(node, config)
        self.index = HoldingsIndex(node.clock)
        if os.environ.get("PYTHONHASHSEED", "random") != "random":
            self.log.warning("PYTHONHASHSEED is set: the index's LFN keys are string hashes, which anyone who "
                             "knows the seed can make collide; unset it for htda-node")
        self._strangers: dict[str, float] = {}  # node -> monotonic time first seen outside the pool
        self._sweeper = Periodic("htda-locator-sweep", config["sweep_interval"], self.sweep, self.log,
                                 first_delay=config["sweep_interval"], clock=node.clock)
        m = node.metrics
        self._lookups = m.counter("htda_locator_lookups_total", "batch lookup requests answered")
        self._lookup_files = m.counter("htda_locator_lookup_files_total", "LFNs looked up")
        self._lookup_hits = m.counter("htda_locator_lookup_hits_total", "looked-up LFNs held by at least one node")
        self._reports = m.counter("htda_locator_reports_total", "holdings reports received", ("kind",))
        self._dropped = m.counter("htda_locator_dropped_nodes_total", "nodes whose entries were dropped",
                                  ("reason",))
        m.gauge("htda_locator_files", "distinct LFNs held by some node", callback=lambda: self.index.file_count)
        m.gauge("htda_locator_nodes", "nodes with holdings", callback=lambda: self.index.node_count)

    # -- life cycle --------------------------------------------------------------
    def loops(self) -> list[Periodic]:
        return [self._sweeper]

    def start(self) -> None:
        self._sweeper.start()

    def stop(self) -> None:
        self._sweeper.stop(timeout=5)

    def heartbeat_info(self) -> dict[str, Any]:
        """Size of the index, and the LFNs looked up and found held since start (the dashboard's hit ratio)."""
        return to_wire(proto.LocatorFacts(files=self.index.file_count, nodes=self.index.node_count,
                                          looked_up=_total(self._lookup_files), held=_total(self._lookup_hits)))

    def on_member_left(self, member: "Member") -> None:
        dropped = self.index.drop(member.name)
        if dropped:
            self._dropped.inc(reason="left")
            self.log.info("dropped %d entries of %s: it left the pool", dropped, member.name)

    def sweep(self) -> list[str]:
        """Drop nodes that have not been pool members for the grace period; return their names."""
        live = {m.name for m in self.node.members()}
        grace = self.config["unknown_grace"] or self.node.member_expiry
        now = self.node.clock.monotonic()
        gone = []
        for name in self.index.node_names():
            if name in live:
                self._strangers.pop(name, None)
            elif now - self._strangers.setdefault(name, now) >= grace:
                self.index.drop(name)
                self._strangers.pop(name, None)
                self._dropped.inc(reason="not-a-member")
                gone.append(name)
        for name in gone:
            self.log.warning("dropped the entries of %s: not a pool member for %.0fs", name, grace)
        return gone

    # -- REST --------------------------------------------------------------------
    def routes(self) -> list[Route]:
        tag = "locator"
        return [
            Route.of(proto.HOLDINGS, self._holdings, "a cache node's holdings: full list or delta", tag=tag,
                     max_body=256 * 1024 * 1024, example=HOLDINGS_EXAMPLE),
            Route.of(proto.LOOKUP, self._lookup, "holders of many LFNs and each node's share of their bytes",
                     access="read", tag=tag, max_body=64 * 1024 * 1024, unsigned_body=64 * 1024,
                     example=LOOKUP_EXAMPLE),
            Route.of(proto.FILE, self._file, "which nodes hold one LFN (admin)", tag=tag, example=FILE_EXAMPLE),
            Route.of(proto.NODES, self._nodes, "files and bytes held per node (admin)", tag=tag,
                     example=NODES_EXAMPLE),
        ]

    def _holdings(self, request: Request) -> proto.HoldingsAnswer:
        body: proto.HoldingsRequest = request.data
        node = body.node
        files = {_lfn(f.lfn, "files"): f.size for f in body.files}
        if body.replace:
            if body.removed:
                raise HTTPError(400, "body.removed: not allowed with replace: true (the list is complete)")
            count = self.index.replace(node, files)
            self._reports.inc(kind="replace")
        else:
            removed = [_lfn(lfn, "removed") for lfn in unset_or(body.removed, [])]
            count = self.index.update(node, files, removed)
            self._reports.inc(kind="delta")
        return proto.HoldingsAnswer(files=count)

    def _lookup(self, request: Request) -> Response:
        lfns = request.data.lfns
        if len(lfns) > self.config["max_lookup"]:
            raise HTTPError(400, f"body.lfns: allows at most {self.config['max_lookup']} items")
        try:
            result = self.index.lookup(lfns)
        except (ValueError, TypeError) as exc:
            raise HTTPError(400, f"body.lfns: {exc}") from None
        self._lookups.inc()
        self._lookup_files.inc(result.requested)
        self._lookup_hits.inc(result.held)
        # The files object arrives encoded (from per-entry fragments); only the small
        # per-node summary is encoded here.
        nodes = json.dumps(result.nodes, separators=(",", ":"))
        return Response(f'{{"files":{result.files_json},"nodes":{nodes}}}'.encode())

    def _file(self, request: Request) -> proto.HeldFile:
        lfn = _lfn(request.params["lfn"], "path")
        holders = self.index.holders(lfn)
        if not holders:
            raise HTTPError(404, f"no node holds {lfn}")
        return proto.HeldFile(lfn=lfn, nodes=holders)

    def _nodes(self, request: Request) -> proto.LocatorNodes:
        held = self.index.nodes()
        return proto.LocatorNodes(nodes={node: proto.HeldSummary(**facts) for node, facts in held.items()})


def _lfn(value: str, where: str) -> str:
    try:
        return normalize_lfn(value)
    except ValueError as exc:
        raise HTTPError(400, f"{where}: {value[:200]!r}: {exc}") from None


def _total(counter: Counter) -> int:
    return int(sum(value for _, value in counter.samples()))

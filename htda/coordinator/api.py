"""The coordinator's REST endpoints (their types: :mod:`htda.protocol.coordinator`): checks to 400, answers."""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import TYPE_CHECKING, TypeVar

from ..lfn import normalize_lfn
from ..node.rest import HTTPError, Request, Route
from ..protocol import coordinator as proto
from ..protocol.base import UNSET, to_wire, unset_or
from .core import CycleReport
from .store import JobRecord

if TYPE_CHECKING:
    from .component import CoordinatorComponent

__all__ = ["BASE", "routes"]

BASE = proto.BASE


# Bulk requests name the same popular files again and again: remember recent answers (errors are not cached).
_normalize = functools.lru_cache(maxsize=1 << 16)(normalize_lfn)


def checked_lfn(value: str, where: str) -> str:
    """``normalize_lfn`` with its error turned into a 400 naming the field."""
    try:
        return _normalize(value)
    except ValueError as exc:
        raise HTTPError(400, f"{where}: {value[:200]!r}: {exc}") from None


_Item = TypeVar("_Item")


def _batch(items: list[_Item], field: str, limit: int) -> list[_Item]:
    if len(items) > limit:
        raise HTTPError(400, f"body.{field}: at most {limit} items per request (coordinator.max_batch)")
    return items


_Time = TypeVar("_Time", bound=float | None)


def _finite(value: _Time, where: str) -> _Time:
    """JSON parsers accept NaN and Infinity; a time must be a real number."""
    if value is not None and not math.isfinite(value):
        raise HTTPError(400, f"{where}: must be a finite number")
    return value


def _job_record(job: proto.Job, index: int) -> JobRecord:
    where = f"body.jobs[{index}]"
    submit_time = _finite(unset_or(job.submit_time, None), f"{where}.submit_time")
    inputs = list(dict.fromkeys(checked_lfn(lfn, f"{where}.inputs") for lfn in job.inputs))
    sizes = {checked_lfn(lfn, f"{where}.sizes"): size for lfn, size in unset_or(job.sizes, {}).items()}
    return JobRecord(job_id=job.job_id, owner=job.owner, inputs=inputs, cpus=unset_or(job.cpus, None),
                     memory=unset_or(job.memory, None), submit_time=submit_time,
                     task=unset_or(job.task, "") or None, sizes=sizes)


def _report(report: CycleReport) -> proto.CycleReport:
    """A cycle's report as the answers carry it."""
    return proto.CycleReport(**dataclasses.asdict(report))


# Answers of the example all-in-one node for the REST reference, after one job read a dataset of two files.
_EXAMPLE_LFN = "/store/demo/dataset1/events_001.root"
_GROUP = {"id": 1, "name": "job:a3090caf4d4013d02acb65411cc8ac13630cb7a2", "kind": "job", "score": 0.99996}
TOP_FILES_EXAMPLE = {"files": [{"lfn": _EXAMPLE_LFN, "score": 0.99996, "size": 22277, "node": "all-in-one"}]}
TOP_GROUPS_EXAMPLE = {"groups": [{**_GROUP, "files": 2}]}
FILE_EXAMPLE = {"lfn": _EXAMPLE_LFN, "size": 22277, "score": 0.99996, "node": "all-in-one", "groups": [_GROUP],
                "accesses": 1, "recent": [{"job_id": "demo#100.0", "owner": "alice", "task": None,
                                           "state": "submitted", "node": None, "time": 1795642839.303}]}
_CYCLE = {"cycle": 7, "kind": "full", "groups_rekeyed": 0, "candidates": 2, "placed": 2, "moved": 1,
          "seconds": 0.00099}
NODES_EXAMPLE = {"cycle": 7, "last_cycle": _CYCLE, "recent_cycles": [_CYCLE], "nodes": [{
    "name": "all-in-one", "url": "http://127.0.0.1:8740", "live": True, "draining": False,
    "capacity_bytes": 65458412857, "free_bytes": 65458368308, "last_seen": 1795642844.387, "assigned_files": 2,
    "assigned_bytes": 44549, "replica_files": 0}]}
PINS_EXAMPLE = {"files": [{"lfn": "/store/demo/dataset2/events_001.root", "node": None}]}
JOBS_EXAMPLE = {"accepted": 1, "duplicates": 0}
EVENTS_EXAMPLE = {"accepted": 1, "duplicates": 0, "unknown": 0, "refused": 0}
ASSIGNMENTS_EXAMPLE = {"node": "all-in-one", "cycle": 7, "draining": False, "files": [
    {"lfn": _EXAMPLE_LFN, "score": 0.99996, "size": 22277, "source": None, "defer": False},
    {"lfn": _EXAMPLE_LFN.replace("001", "002"), "score": 0.99996, "size": 22272, "source": None, "defer": False}],
    "groups": [[0, 1]]}


def routes(component: "CoordinatorComponent") -> list[Route]:
    """The coordinator's endpoints, bound to ``component``."""
    core = component.core
    limit = component.config["max_batch"]
    tag = "coordinator"

    def jobs(request: Request) -> proto.JobsAnswer:
        body: proto.JobsRequest = request.data
        records = [_job_record(job, i) for i, job in enumerate(_batch(body.jobs, "jobs", limit))]
        result = core.submit_jobs(records)
        component.count("jobs", result.accepted, result.duplicates)
        return proto.JobsAnswer(accepted=result.accepted, duplicates=result.duplicates)

    def events(request: Request) -> proto.EventsAnswer:
        body: proto.EventsRequest = request.data
        items = _batch(body.events, "events", limit)
        for i, item in enumerate(items):
            _finite(item.time, f"body.events[{i}].time")
        result = core.report_events([to_wire(item) for item in items])
        component.count("events", result.accepted, result.duplicates)
        return proto.EventsAnswer(accepted=result.accepted, duplicates=result.duplicates, unknown=result.unknown,
                                  refused=result.refused)

    def releases(request: Request) -> proto.ReleasesAnswer:
        body: proto.ReleasesRequest = request.data
        lfns = [checked_lfn(lfn, "body.lfns") for lfn in _batch(body.lfns, "lfns", limit)]
        released = core.release(body.node, lfns, unset_or(body.reason, None))
        component.wake()
        return proto.ReleasesAnswer(released=released)

    def assignments(request: Request) -> proto.Assignments:
        return core.assignments(request.params["node"])

    def top_files(request: Request) -> proto.TopFiles:
        return proto.TopFiles(files=core.top_files(request.query_int("n", 100, 1, 100_000)))

    def top_groups(request: Request) -> proto.TopGroups:
        return proto.TopGroups(groups=core.top_groups(request.query_int("n", 100, 1, 100_000)))

    def file_info(request: Request) -> proto.FileInfo:
        lfn = checked_lfn(request.params["lfn"], "path")
        info = core.file_info(lfn, request.query_int("limit", 50, 1, 10_000))
        if info is None:
            raise HTTPError(404, f"no job ever asked for {lfn}")
        return info

    def nodes(request: Request) -> proto.NodesAnswer:
        reports = [_report(report) for report in component.reports]
        return proto.NodesAnswer(cycle=core.cycle, last_cycle=reports[-1] if reports else None,
                                 recent_cycles=reports, nodes=core.node_summary(component.cache_nodes()))

    def drain(request: Request) -> proto.DrainAnswer:
        name = request.params["node"]
        body: proto.DrainRequest = request.data
        given = [value for value in (body.draining, body.drain) if value is not UNSET]
        if len(given) != 1:
            raise HTTPError(400, "body: give exactly one of 'draining' (or its other name 'drain')")
        draining = bool(given[0])
        if not core.set_draining(name, draining):
            raise HTTPError(404, f"no cache node named {name!r} has reported to this coordinator")
        component.wake()
        return proto.DrainAnswer(node=name, draining=draining)

    def pins(request: Request) -> proto.PinAnswer:
        body: proto.PinRequest = request.data
        lfns = [checked_lfn(lfn, "body.lfns") for lfn in unset_or(body.lfns, [])]
        groups = unset_or(body.groups, [])
        if len(lfns) + len(groups) > limit:
            raise HTTPError(400, f"body: at most {limit} LFNs and groups per request (coordinator.max_batch)")
        answer = core.pin(lfns, groups, body.pin)
        component.wake()
        return answer

    def reads(request: Request) -> proto.ReadsAnswer:
        body: proto.ReadsRequest = request.data
        lfns = [checked_lfn(lfn, "body.lfns") for lfn in _batch(body.lfns, "lfns", limit)]
        core.report_reads(body.node, lfns, _finite(body.ttl, "body.ttl"))
        return proto.ReadsAnswer(reported=len(lfns))

    def reading(request: Request) -> proto.StorageReads:
        return core.storage_reads()

    def pinned(request: Request) -> proto.Pinned:
        return proto.Pinned(files=core.pinned_files())

    def cycle_now(request: Request) -> proto.CycleAnswer:
        full = bool(request.body) and request.data.full
        report = component.run_cycle(full=full)
        return proto.CycleAnswer(cycle=_report(report) if report else None)

    big = 256 * 1024 * 1024
    return [
        Route.of(proto.JOBS, jobs, "submit job records with their inputs (bulk, idempotent on job_id)", tag=tag,
                 max_body=big, example=JOBS_EXAMPLE),
        Route.of(proto.EVENTS, events, "job state changes; 'started' records accesses (idempotent)", tag=tag,
                 max_body=big, example=EVENTS_EXAMPLE),
        Route.of(proto.RELEASES, releases, "files a cache node cannot hold; placed elsewhere", tag=tag,
                 max_body=big),
        Route.of(proto.READS, reads, "files jobs on a cache node's worker read from storage now (replaces the "
                 "node's last report until ttl seconds pass); copies of inputs only one job wanted wait for them",
                 tag=tag, max_body=big),
        Route.of(proto.READING, reading, "files read from storage now, by node, and those deferred (admin)",
                 tag=tag),
        Route.of(proto.ASSIGNMENTS, assignments, "the files a cache node should hold, best first", tag=tag,
                 example=ASSIGNMENTS_EXAMPLE),
        Route.of(proto.TOP_FILES, top_files, "best-rated files (admin)", query={"n": "how many (100)"}, tag=tag,
                 example=TOP_FILES_EXAMPLE),
        Route.of(proto.TOP_GROUPS, top_groups, "best-rated file groups (admin)", query={"n": "how many (100)"},
                 tag=tag, example=TOP_GROUPS_EXAMPLE),
        Route.of(proto.FILE, file_info, "one file's score, groups, placement and history (admin)",
                 query={"limit": "most recent accesses listed (50)"}, tag=tag, example=FILE_EXAMPLE),
        Route.of(proto.NODES, nodes, "per cache node: capacity and assignments (admin)", tag=tag,
                 example=NODES_EXAMPLE),
        Route.of(proto.PIN, pins, "pin or unpin files (by LFN, or all files of groups by name): pinned files are "
                 "placed first and never displaced (admin)", tag=tag),
        Route.of(proto.PINNED, pinned, "the pinned files and their nodes (admin)", tag=tag, example=PINS_EXAMPLE),
        Route.of(proto.CYCLE, cycle_now, "run a work cycle now (full: place every candidate again) and answer its "
                 "report (null while no cache node is live) (admin)", tag=tag),
        Route.of(proto.DRAIN, drain, "mark a cache node draining, or not (admin)", tag=tag),
    ]

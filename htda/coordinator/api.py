"""The coordinator's REST endpoints: request schemas, validation to 400, answers."""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from typing import TYPE_CHECKING, Any, TypeVar

from ..lfn import normalize_lfn
from ..node.rest import API, HTTPError, Request, Route
from .store import JobRecord

if TYPE_CHECKING:
    from .component import CoordinatorComponent

__all__ = ["BASE", "EVENTS_BODY", "JOBS_BODY", "READS_BODY", "RELEASES_BODY", "routes"]

BASE = f"{API}/coordinator"

_NAME = {"type": "string", "minLength": 1, "maxLength": 255}
_TEXT = {"type": "string", "maxLength": 255}  # may be empty: an empty task is no task
_LFN = {"type": "string", "minLength": 1, "maxLength": 4096}
_TIME = {"type": "number", "minimum": 0}

JOBS_BODY = {
    "type": "object", "additionalProperties": False, "required": ["jobs"],
    "properties": {"jobs": {"type": "array", "items": {
        "type": "object", "additionalProperties": False, "required": ["job_id", "owner", "inputs"],
        "properties": {
            "job_id": _NAME, "owner": _TEXT, "inputs": {"type": "array", "items": _LFN},
            "cpus": {"type": "integer", "minimum": 0, "maximum": 1 << 20},
            "memory": {"type": "integer", "minimum": 0, "maximum": (1 << 31) - 1},  # MB; a 32-bit column
            "submit_time": _TIME, "task": _TEXT,
            "sizes": {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0,
                                                                  "maximum": 1 << 62}},
        }}}},
}

EVENTS_BODY = {
    "type": "object", "additionalProperties": False, "required": ["events"],
    "properties": {"events": {"type": "array", "items": {
        "type": "object", "additionalProperties": False, "required": ["job_id", "state", "time"],
        "properties": {"job_id": _NAME, "state": {"type": "string", "enum": ["started", "finished", "removed"]},
                       "time": _TIME, "node": _NAME, "owner": _TEXT}}}},
}

RELEASES_BODY = {
    "type": "object", "additionalProperties": False, "required": ["node", "lfns"],
    "properties": {"node": _NAME, "lfns": {"type": "array", "items": _LFN},
                   "reason": {"type": "string", "maxLength": 1024}},
}

READS_BODY = {
    "type": "object", "additionalProperties": False, "required": ["node", "lfns", "ttl"],
    "properties": {"node": _NAME, "lfns": {"type": "array", "items": _LFN},
                   "ttl": {"type": "number", "minimum": 0, "maximum": 3600}},
}

PINS_BODY = {
    "type": "object", "additionalProperties": False, "required": ["pin"],
    "properties": {"lfns": {"type": "array", "items": _LFN}, "groups": {"type": "array", "items": _NAME},
                   "pin": {"type": "boolean"}},
}

CYCLE_BODY = {"type": "object", "additionalProperties": False, "properties": {"full": {"type": "boolean"}}}

DRAIN_BODY = {  # "drain" is accepted as another name of "draining"
    "type": "object", "additionalProperties": False,
    "properties": {"draining": {"type": "boolean"}, "drain": {"type": "boolean"}},
}


# Bulk requests name the same popular files again and again: remember recent answers (errors are not cached).
_normalize = functools.lru_cache(maxsize=1 << 16)(normalize_lfn)


def checked_lfn(value: str, where: str) -> str:
    """``normalize_lfn`` with its error turned into a 400 naming the field."""
    try:
        return _normalize(value)
    except ValueError as exc:
        raise HTTPError(400, f"{where}: {value[:200]!r}: {exc}") from None


def _batch(request: Request, field: str, limit: int) -> list[Any]:
    items = request.json[field]
    if len(items) > limit:
        raise HTTPError(400, f"body.{field}: at most {limit} items per request (coordinator.max_batch)")
    return items


_Time = TypeVar("_Time", bound=float | None)


def _finite(value: _Time, where: str) -> _Time:
    """JSON parsers accept NaN and Infinity; a time must be a real number."""
    if value is not None and not math.isfinite(value):
        raise HTTPError(400, f"{where}: must be a finite number")
    return value


def _job_record(job: dict[str, Any], index: int) -> JobRecord:
    where = f"body.jobs[{index}]"
    _finite(job.get("submit_time"), f"{where}.submit_time")
    inputs = list(dict.fromkeys(checked_lfn(lfn, f"{where}.inputs") for lfn in job["inputs"]))
    sizes = {checked_lfn(lfn, f"{where}.sizes"): size for lfn, size in (job.get("sizes") or {}).items()}
    return JobRecord(job_id=job["job_id"], owner=job["owner"], inputs=inputs, cpus=job.get("cpus"),
                     memory=job.get("memory"), submit_time=job.get("submit_time"), task=job.get("task") or None,
                     sizes=sizes)


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


def routes(component: "CoordinatorComponent") -> list[Route]:
    """The coordinator's endpoints, bound to ``component``."""
    core = component.core
    limit = component.config["max_batch"]
    tag = "coordinator"

    def jobs(request: Request) -> dict[str, Any]:
        records = [_job_record(job, i) for i, job in enumerate(_batch(request, "jobs", limit))]
        result = core.submit_jobs(records)
        component.count("jobs", result.accepted, result.duplicates)
        return {"accepted": result.accepted, "duplicates": result.duplicates}

    def events(request: Request) -> dict[str, Any]:
        items = _batch(request, "events", limit)
        for i, item in enumerate(items):
            _finite(item["time"], f"body.events[{i}].time")
        result = core.report_events(items)
        component.count("events", result.accepted, result.duplicates)
        return {"accepted": result.accepted, "duplicates": result.duplicates, "unknown": result.unknown,
                "refused": result.refused}

    def releases(request: Request) -> dict[str, Any]:
        body = request.json
        lfns = [checked_lfn(lfn, "body.lfns") for lfn in _batch(request, "lfns", limit)]
        released = core.release(body["node"], lfns, body.get("reason"), time.time())
        component.wake()
        return {"released": released}

    def assignments(request: Request) -> dict[str, Any]:
        return core.assignments(request.params["node"])

    def top_files(request: Request) -> dict[str, Any]:
        return {"files": core.top_files(request.query_int("n", 100, 1, 100_000), time.time())}

    def top_groups(request: Request) -> dict[str, Any]:
        return {"groups": core.top_groups(request.query_int("n", 100, 1, 100_000), time.time())}

    def file_info(request: Request) -> dict[str, Any]:
        lfn = checked_lfn(request.params["lfn"], "path")
        info = core.file_info(lfn, request.query_int("limit", 50, 1, 10_000), time.time())
        if info is None:
            raise HTTPError(404, f"no job ever asked for {lfn}")
        return info

    def nodes(request: Request) -> dict[str, Any]:
        reports = [dataclasses.asdict(report) for report in component.reports]
        return {"cycle": core.cycle, "last_cycle": reports[-1] if reports else None, "recent_cycles": reports,
                "nodes": core.node_summary(component.cache_nodes())}

    def drain(request: Request) -> dict[str, Any]:
        name = request.params["node"]
        body = request.json
        if len(body) != 1:
            raise HTTPError(400, "body: give exactly one of 'draining' (or its other name 'drain')")
        draining = next(iter(body.values()))
        if not core.set_draining(name, draining):
            raise HTTPError(404, f"no cache node named {name!r} has reported to this coordinator")
        component.wake()
        return {"node": name, "draining": draining}

    def pins(request: Request) -> dict[str, Any]:
        body = request.json
        lfns = [checked_lfn(lfn, "body.lfns") for lfn in body.get("lfns") or ()]
        groups = body.get("groups") or []
        if len(lfns) + len(groups) > limit:
            raise HTTPError(400, f"body: at most {limit} LFNs and groups per request (coordinator.max_batch)")
        answer = core.pin(lfns, groups, body["pin"])
        component.wake()
        return answer

    def reads(request: Request) -> dict[str, Any]:
        body = request.json
        lfns = [checked_lfn(lfn, "body.lfns") for lfn in _batch(request, "lfns", limit)]
        core.report_reads(body["node"], lfns, _finite(body["ttl"], "body.ttl"), time.time())
        return {"reported": len(lfns)}

    def reading(request: Request) -> dict[str, Any]:
        return core.storage_reads(time.time())

    def pinned(request: Request) -> dict[str, Any]:
        return {"files": core.pinned_files()}

    def cycle_now(request: Request) -> dict[str, Any]:
        full = bool(request.body) and request.json.get("full", False)
        report = component.run_cycle(full=full)
        return {"cycle": dataclasses.asdict(report) if report else None}

    big = 256 * 1024 * 1024
    return [
        Route("POST", f"{BASE}/jobs", jobs, "submit job records with their inputs (bulk, idempotent on job_id)",
              body=JOBS_BODY, tag=tag, max_body=big),
        Route("POST", f"{BASE}/events", events, "job state changes; 'started' records accesses (idempotent)",
              body=EVENTS_BODY, tag=tag, max_body=big),
        Route("POST", f"{BASE}/releases", releases, "files a cache node cannot hold; placed elsewhere",
              body=RELEASES_BODY, tag=tag, max_body=big),
        Route("POST", f"{BASE}/reads", reads, "files jobs on a cache node's worker read from storage now (replaces "
              "the node's last report until ttl seconds pass); copies of inputs only one job wanted wait for them",
              body=READS_BODY, tag=tag, max_body=big),
        Route("GET", f"{BASE}/reads", reading, "files read from storage now, by node, and those deferred (admin)",
              tag=tag),
        Route("GET", f"{BASE}/assignments/{{node}}", assignments, "the files a cache node should hold, best first",
              tag=tag),
        Route("GET", f"{BASE}/files/top", top_files, "best-rated files (admin)", query={"n": "how many (100)"},
              tag=tag, example=TOP_FILES_EXAMPLE),
        Route("GET", f"{BASE}/groups/top", top_groups, "best-rated file groups (admin)",
              query={"n": "how many (100)"}, tag=tag, example=TOP_GROUPS_EXAMPLE),
        Route("GET", f"{BASE}/files/{{lfn:path}}", file_info, "one file's score, groups, placement and history "
              "(admin)", query={"limit": "most recent accesses listed (50)"}, tag=tag, example=FILE_EXAMPLE),
        Route("GET", f"{BASE}/nodes", nodes, "per cache node: capacity and assignments (admin)", tag=tag,
              example=NODES_EXAMPLE),
        Route("POST", f"{BASE}/pins", pins, "pin or unpin files (by LFN, or all files of groups by name): "
              "pinned files are placed first and never displaced (admin)", body=PINS_BODY, tag=tag),
        Route("GET", f"{BASE}/pins", pinned, "the pinned files and their nodes (admin)", tag=tag,
              example=PINS_EXAMPLE),
        Route("POST", f"{BASE}/cycle", cycle_now, "run a work cycle now (full: place every candidate again) and "
              "answer its report (null while no cache node is live) (admin)", body=CYCLE_BODY, tag=tag),
        Route("POST", f"{BASE}/nodes/{{node}}/drain", drain, "mark a cache node draining, or not (admin)",
              body=DRAIN_BODY, tag=tag),
    ]

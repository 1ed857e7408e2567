"""The coordinator's contract: jobs and events in (submit agents), assignments out, releases and reads in
(cache nodes), admin queries (CLI, dashboard)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Annotated, Literal

from msgspec import UNSET, Meta, UnsetType

from . import paths
from .base import Answer, Body, Endpoint, Lfn, Name, Text, Time

# the files of the examples: a dataset of two files as the demo writes it
_LFN1, _LFN2 = "/store/demo/dataset1/events_001.root", "/store/demo/dataset1/events_002.root"
_JOB = "submit.example.org#1234.0"

__all__ = ["ASSIGNMENTS", "Access", "AssignedFile", "Assignments", "BASE", "CYCLE", "CacheNodeSummary", "CycleAnswer",
           "CycleReport", "CycleRequest", "DRAIN", "DrainAnswer", "DrainRequest", "EVENTS", "Event", "EventsAnswer",
           "EventsRequest", "FILE", "FileInfo", "GroupInfo", "INPUT_KEY_LENGTH", "JOBS", "Job", "JobsAnswer",
           "JobsRequest", "NODES", "NodesAnswer", "PIN", "PINNED", "PinAnswer", "PinRequest", "PinnedFile", "Pinned",
           "READS", "READING", "ReadsAnswer", "ReadsRequest", "RELEASES", "ReleasesAnswer", "ReleasesRequest",
           "StorageReads", "TOP_FILES", "TOP_GROUPS", "TopFile", "TopFiles", "TopGroup", "TopGroups", "input_key",
           "inputs_digest"]

BASE = paths.COORDINATOR

#: hex digits of a job's input key: 64 bits, short in a machine ad that lists many, and no two input sets of a
#: pool meet in one by chance
INPUT_KEY_LENGTH = 16


def inputs_digest(lfns: Iterable[str]) -> str:
    """The SHA-1 of a job's input set (its LFNs sorted, each once): jobs reading the same files share it, and
    the coordinator names their input group by it."""
    return hashlib.sha1("\n".join(sorted(set(lfns))).encode("utf-8", "surrogatepass")).hexdigest()


def input_key(lfns: Iterable[str]) -> str:
    """A job's input key: the start of :func:`inputs_digest`.  The translate hook writes it into the job ad
    (``HTDA_InputKey``); a cache node holding every file of that input set publishes it in its machine ad
    (``HTDA_CacheGroups``), so the job can follow copies made after it was routed."""
    return inputs_digest(lfns)[:INPUT_KEY_LENGTH]


class Job(Body):
    """One job as the submit agent publishes it: its inputs, and what the hooks knew of it."""

    job_id: Name
    owner: Text
    inputs: list[Lfn]
    cpus: Annotated[int, Meta(ge=0, le=1 << 20)] | UnsetType = UNSET
    memory: Annotated[int, Meta(ge=0, le=(1 << 31) - 1)] | UnsetType = UNSET  # MB; a 32-bit column
    submit_time: Time | UnsetType = UNSET
    task: Text | UnsetType = UNSET
    sizes: dict[str, Annotated[int, Meta(ge=0, le=1 << 62)]] | UnsetType = UNSET


class JobsRequest(Body):
    jobs: list[Job]

    example = {"jobs": [{"job_id": _JOB, "owner": "alice", "inputs": [_LFN1, _LFN2], "cpus": 1, "memory": 2048,
                         "submit_time": 1795642839.3, "task": "ttbar-selection",
                         "sizes": {_LFN1: 2_147_483_648, _LFN2: 1_932_735_283}}]}


class JobsAnswer(Answer):
    accepted: int
    duplicates: int


class Event(Body):
    """A job's state change; ``started`` records its accesses."""

    job_id: Name
    state: Literal["started", "finished", "removed"]
    time: Time
    node: Name | UnsetType = UNSET
    owner: Text | UnsetType = UNSET


class EventsRequest(Body):
    events: list[Event]

    example = {"events": [{"job_id": _JOB, "state": "started", "time": 1795642845.0, "node": "worker-07",
                           "owner": "alice"}]}


class EventsAnswer(Answer):
    accepted: int
    duplicates: int
    unknown: int
    refused: int


class ReleasesRequest(Body):
    """Files a cache node cannot hold; the coordinator places them elsewhere."""

    node: Name
    lfns: list[Lfn]
    reason: Annotated[str, Meta(max_length=1024)] | UnsetType = UNSET

    example = {"node": "worker-07", "lfns": [_LFN2], "reason": "no room"}


class ReleasesAnswer(Answer):
    released: int

    example = {"released": 1}


class ReadsRequest(Body):
    """Files jobs on a cache node's worker read from storage now; replaces the node's last report for ``ttl``."""

    node: Name
    lfns: list[Lfn]
    ttl: Annotated[float, Meta(ge=0, le=3600)]

    example = {"node": "worker-07", "lfns": [_LFN1, _LFN2], "ttl": 60.0}


class ReadsAnswer(Answer):
    reported: int

    example = {"reported": 2}


class StorageReads(Answer):
    """Files read from storage now, by node; the files whose copies wait for those reads (at most ``max_defer``
    seconds)."""

    nodes: dict[str, list[str]]
    deferred: list[str]
    max_defer: float = 0.0

    example = {"nodes": {"worker-07": [_LFN1, _LFN2]}, "deferred": [_LFN1, _LFN2], "max_defer": 300.0}


class AssignedFile(Answer):
    """One file a cache node should hold.  A replica (a second or later copy of a popular group) names the
    ``peers`` holding it and is copied from them only (``peers_only``), never from storage."""

    lfn: str
    score: float
    size: int | None
    source: str | None
    defer: bool = False
    peers: list[str] | UnsetType = UNSET
    peers_only: bool | UnsetType = UNSET


class Assignments(Answer):
    """The full list of files a cache node should hold, best first (the pull contract)."""

    node: str
    cycle: int
    files: list[AssignedFile]
    draining: bool = False
    #: hot input groups all of whose files are on this list, best first, each as the positions of its files in
    #: ``files``: the node publishes the :func:`input_key` of those it holds whole
    groups: list[list[Annotated[int, Meta(ge=0)]]] = []


class TopFile(Answer):
    lfn: str
    score: float
    size: int | None
    node: str | None


class TopFiles(Answer):
    files: list[TopFile]


class GroupInfo(Answer):
    id: int
    name: str | None
    kind: str | None
    score: float


class TopGroup(GroupInfo):
    files: int


class TopGroups(Answer):
    groups: list[TopGroup]


class Access(Answer):
    """A job that read a file: who, in which task, where, and when (submitted or started, as the coordinator
    counts accesses)."""

    job_id: str
    owner: str | None
    task: str | None
    state: str | None
    node: str | None
    time: float | None


class FileInfo(Answer):
    lfn: str
    size: int | None
    score: float
    node: str | None
    groups: list[GroupInfo]
    accesses: int
    recent: list[Access]


class CycleReport(Answer):
    cycle: int
    kind: str
    groups_rekeyed: int
    candidates: int
    placed: int
    moved: int
    seconds: float


class CacheNodeSummary(Answer):
    name: str
    url: str | None
    live: bool
    draining: bool
    capacity_bytes: int | None
    free_bytes: int | None
    last_seen: float | None
    assigned_files: int
    assigned_bytes: int
    replica_files: int = 0


class NodesAnswer(Answer):
    cycle: int
    last_cycle: CycleReport | None
    recent_cycles: list[CycleReport]
    nodes: list[CacheNodeSummary]


class PinRequest(Body):
    """Pin (``pin``: true) or unpin files, named one by one (``lfns``) or by their groups (``groups``)."""

    pin: bool
    lfns: list[Lfn] | UnsetType = UNSET
    groups: list[Name] | UnsetType = UNSET

    example = {"pin": True, "lfns": [_LFN1], "groups": ["dataset:/store/demo/dataset2"]}


class PinAnswer(Answer):
    files: int
    pinned: int
    unknown_groups: list[str]

    example = {"files": 1, "pinned": 1, "unknown_groups": ["dataset:/store/demo/dataset2"]}


class PinnedFile(Answer):
    lfn: str
    node: str | None


class Pinned(Answer):
    files: list[PinnedFile]


class CycleRequest(Body):
    """``full``: place every candidate again (the body may also be empty)."""

    full: bool = False

    example = {"full": True}


class CycleAnswer(Answer):
    cycle: CycleReport | None

    example = {"cycle": {"cycle": 8, "kind": "full", "groups_rekeyed": 1, "candidates": 2, "placed": 2, "moved": 0,
                         "seconds": 0.0012}}


class DrainRequest(Body):
    """Exactly one of ``draining`` and its other name ``drain``."""

    draining: bool | UnsetType = UNSET
    drain: bool | UnsetType = UNSET

    example = {"draining": True}


class DrainAnswer(Answer):
    node: str
    draining: bool

    example = {"node": "worker-07", "draining": True}


JOBS = Endpoint("POST", paths.JOBS, JobsRequest, JobsAnswer)
EVENTS = Endpoint("POST", paths.EVENTS, EventsRequest, EventsAnswer)
RELEASES = Endpoint("POST", paths.RELEASES, ReleasesRequest, ReleasesAnswer)
READS = Endpoint("POST", paths.READS, ReadsRequest, ReadsAnswer)
READING = Endpoint("GET", paths.READS, None, StorageReads)
ASSIGNMENTS = Endpoint("GET", paths.ASSIGNMENTS, None, Assignments)
TOP_FILES = Endpoint("GET", paths.TOP_FILES, None, TopFiles)
TOP_GROUPS = Endpoint("GET", paths.TOP_GROUPS, None, TopGroups)
FILE = Endpoint("GET", paths.FILE, None, FileInfo)
NODES = Endpoint("GET", paths.NODES, None, NodesAnswer)
PIN = Endpoint("POST", paths.PINS, PinRequest, PinAnswer)
PINNED = Endpoint("GET", paths.PINS, None, Pinned)
CYCLE = Endpoint("POST", paths.CYCLE, CycleRequest, CycleAnswer)
DRAIN = Endpoint("POST", paths.DRAIN, DrainRequest, DrainAnswer)

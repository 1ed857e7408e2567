"""A cache node's admin contract (CLI, dashboard, operators)."""

from __future__ import annotations

from typing import Annotated

from msgspec import UNSET, Meta, UnsetType

from . import paths
from .base import Answer, Body, Bytes, Endpoint

__all__ = ["BASE", "COPIES", "CYCLE", "CacheCycle", "CacheCycleRequest", "CacheFacts", "CacheHeartbeat", "CacheFiles",
           "Copy", "DEVICES", "Device", "Devices", "EVICT", "EVICTIONS", "EvictAnswer", "EvictRequest", "Eviction",
           "Evictions", "FILES", "READ_AHEAD", "ReadAheadAnswer", "ReadAheadRequest", "Retry", "STAGING", "Staging",
           "StagingCopy", "StagingFailure", "VIEW", "ViewInfo"]

BASE = paths.CACHE


class CacheFacts(Answer):
    """What a cache node says of itself in its heartbeats (``info.cache``): use, room and copies held and being
    made, in the order ``htda nodes`` shows them."""

    used_bytes: Bytes
    free_bytes: Bytes
    capacity_bytes: Bytes
    files: Annotated[int, Meta(ge=0)]
    staging: Annotated[int, Meta(ge=0)]


class CacheHeartbeat(CacheFacts):
    """A cache node's ``info.cache`` in its heartbeats: its facts, and the input keys
    (:func:`htda.protocol.coordinator.input_key`) of the hot input groups it holds whole, with the time that
    list last changed (the startd cron publishes them, and forces a machine-ad update after a change)."""

    groups: list[str] = []
    groups_changed: float = 0.0


class Copy(Answer):
    lfn: str
    size: int
    mtime: float | None
    device: str
    checksum: str | None
    checksum_kind: str | None
    score: float
    source: str | None
    staged_at: float | None
    checked_at: float | None


class CacheFiles(Answer):
    node: str
    total: int
    files: list[Copy]


class Device(Answer):
    path: str
    backend: str
    capacity_bytes: int
    used_bytes: int
    free_bytes: int
    filesystem_bytes: int | None
    filesystem_free_bytes: int | None
    high_watermark: float
    low_watermark: float
    files: int


class Devices(Answer):
    devices: list[Device]


class StagingCopy(Answer):
    """A copy being made (``state``: queued, copying, verifying) and where its bytes come from."""

    lfn: str
    state: str
    size: int | None
    done_bytes: int
    score: float
    device: str
    source: str
    peers: list[str]
    storage_fallback: bool
    queued_at: float | None
    started_at: float | None
    error: str | None


class StagingFailure(Answer):
    lfn: str
    attempt: int
    error: str
    permanent: bool
    time: float


class Retry(Answer):
    """When the next copy of a failed file may start (``permanent``: not until it changes in storage)."""

    count: int
    retry_at: float
    error: str
    permanent: bool


class Staging(Answer):
    max_staging: int
    active: list[StagingCopy]
    queued: list[StagingCopy]
    failed: list[StagingFailure]
    retrying: dict[str, Retry]


class Eviction(Answer):
    lfn: str
    size: int
    device: str
    reason: str
    time: float


class Evictions(Answer):
    """Recently removed copies, newest first."""

    evictions: list[Eviction]

    example = {"evictions": [{"lfn": "/store/demo/dataset2/events_001.root", "size": 22277,
                              "device": "/var/lib/htda/cache", "reason": "outranked", "time": 1795642901.2}]}


class ViewInfo(Answer):
    """The union view: its driver, mount point, branches (cache devices, then storage) and last error; only
    ``driver`` (null) when the node runs without a view."""

    driver: str | None
    view: str | UnsetType = UNSET
    branches: list[str] | UnsetType = UNSET
    storage: str | None | UnsetType = UNSET
    error: str | None | UnsetType = UNSET

    example = {"driver": "mergerfs", "view": "/var/lib/htda/view", "branches": ["/var/lib/htda/cache/data"],
               "storage": "/mnt/storage", "error": None}


class CacheCycle(Answer):
    """What one cycle did: counts of the assignment's work (left out when no coordinator answered), copies
    dropped by revalidation, and the cycle's number and duration."""

    coordinator: str | None
    cycle: int
    revalidated_dropped: int
    seconds: float
    wanted: int | UnsetType = UNSET
    stage: int | UnsetType = UNSET
    deferred: int | UnsetType = UNSET
    unconfirmed: int | UnsetType = UNSET
    spare: int | UnsetType = UNSET  # copies no longer assigned, kept in the room left
    evict: int | UnsetType = UNSET
    release: int | UnsetType = UNSET

    example = {"coordinator": "http://127.0.0.1:8740", "wanted": 2, "stage": 1, "deferred": 0, "unconfirmed": 1,
               "spare": 1, "evict": 0, "release": 0, "revalidated_dropped": 0, "cycle": 12, "seconds": 0.041}


class CacheCycleRequest(Body):
    """No fields: the cycle takes nothing."""

    example = {}


class EvictRequest(Body):
    lfns: Annotated[list[Annotated[str, Meta(max_length=4096)]], Meta(min_length=1, max_length=100_000)]

    example = {"lfns": ["/store/demo/dataset1/events_001.root", "/store/demo/dataset9/events_001.root"]}


class EvictAnswer(Answer):
    evicted: list[str]
    not_held: list[str]

    example = {"evicted": ["/store/demo/dataset1/events_001.root"],
               "not_held": ["/store/demo/dataset9/events_001.root"]}


class ReadAheadRequest(Body):
    #: each job's inputs, in the order it reads them
    jobs: Annotated[list[Annotated[list[Annotated[str, Meta(max_length=4096)]], Meta(min_length=1, max_length=1000)]],
                    Meta(min_length=1, max_length=1000)]

    example = {"jobs": [["/store/demo/dataset1/events_001.root", "/store/demo/dataset1/events_002.root"]]}


class ReadAheadAnswer(Answer):
    queued: int  # the rest are held or copied here, read ahead lately, or over the queue's limit

    example = {"queued": 2}


FILES = Endpoint("GET", paths.CACHE_FILES, None, CacheFiles)
DEVICES = Endpoint("GET", paths.CACHE_DEVICES, None, Devices)
STAGING = Endpoint("GET", paths.CACHE_STAGING, None, Staging)
EVICTIONS = Endpoint("GET", paths.CACHE_EVICTIONS, None, Evictions)
VIEW = Endpoint("GET", paths.CACHE_VIEW, None, ViewInfo)
#: a byte range of a copy (application/octet-stream), for a cache node copying it from a peer
COPIES: Endpoint[bytes] = Endpoint("GET", paths.CACHE_COPIES, None, None)
CYCLE = Endpoint("POST", paths.CACHE_CYCLE, CacheCycleRequest, CacheCycle)
EVICT = Endpoint("POST", paths.CACHE_EVICT, EvictRequest, EvictAnswer)
READ_AHEAD = Endpoint("POST", paths.CACHE_READ_AHEAD, ReadAheadRequest, ReadAheadAnswer)

"""A cache node's admin contract (CLI, dashboard, operators)."""

from __future__ import annotations

from typing import Annotated, Any

from msgspec import Meta

from . import paths
from .base import Answer, Body, Endpoint

__all__ = ["BASE", "COPIES", "CYCLE", "CacheCycleRequest", "CacheFiles", "Copy",
           "DEVICES", "Device", "Devices", "EVICT",
           "EVICTIONS", "EvictAnswer", "EvictRequest", "Evictions", "FILES", "STAGING", "Staging", "VIEW"]

BASE = paths.CACHE


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


class Staging(Answer):
    max_staging: int
    active: list[dict[str, Any]]
    queued: list[dict[str, Any]]
    failed: list[dict[str, Any]]
    retrying: dict[str, dict[str, Any]]


class Evictions(Answer):
    evictions: list[dict[str, Any]]


class CacheCycleRequest(Body):
    """No fields: the cycle takes nothing."""


class EvictRequest(Body):
    lfns: Annotated[list[Annotated[str, Meta(max_length=4096)]], Meta(min_length=1, max_length=100_000)]


class EvictAnswer(Answer):
    evicted: list[str]
    not_held: list[str]


FILES = Endpoint("GET", paths.CACHE_FILES, None, CacheFiles)
DEVICES = Endpoint("GET", paths.CACHE_DEVICES, None, Devices)
STAGING = Endpoint("GET", paths.CACHE_STAGING, None, Staging)
EVICTIONS = Endpoint("GET", paths.CACHE_EVICTIONS, None, Evictions)
VIEW = Endpoint("GET", paths.CACHE_VIEW, None, dict[str, Any])
#: a byte range of a copy (application/octet-stream), for a cache node copying it from a peer
COPIES: Endpoint[bytes] = Endpoint("GET", paths.CACHE_COPIES, None, None)
CYCLE = Endpoint("POST", paths.CACHE_CYCLE, CacheCycleRequest, dict[str, Any])
EVICT = Endpoint("POST", paths.CACHE_EVICT, EvictRequest, EvictAnswer)

"""A typed client per role: the endpoints of :mod:`htda.protocol`, called with the node's signed client.

Each method sends the request type's fields (leaving out those not given) and checks the answer with the
endpoint's answer type; an answer that does not fit raises :class:`~htda.node.client.BadResponse`, a
:class:`~htda.node.client.ClientError` like every other failure of the call, so callers handle one error.
"""

from __future__ import annotations

from typing import Any, Protocol, TypeVar, cast

from ..node.client import BadResponse
from . import cache, coordinator, locator, node
from .base import UNSET, Endpoint, ProtocolError, check_answer, to_wire

__all__ = ["CacheClient", "CoordinatorClient", "LocatorClient", "NodeClient", "RoleClient", "Transport"]

T = TypeVar("T")


class Transport(Protocol):
    """What the clients need of :class:`htda.node.client.Client` (a test's fake may stand in)."""

    def get(self, url: str, timeout: float | None = None, retries: int | None = None) -> Any: ...

    def post(self, url: str, payload: Any, timeout: float | None = None, idempotent: bool = False,
             retries: int | None = None) -> Any: ...


class RoleClient:
    """What every role's client shares: :meth:`call` (a typed answer), :meth:`fetch` (plain JSON) and
    :meth:`exchange` (both)."""

    def __init__(self, client: Transport, base_url: str):
        self.client, self.base_url = client, base_url.rstrip("/")

    def call(self, endpoint: Endpoint[T], body: Any = None, query: dict[str, Any] | None = None,
             timeout: float | None = None, idempotent: bool = False, retries: int | None = None,
             **params: str) -> T:
        """Call ``endpoint``; the answer checked against (and converted to) its answer type."""
        return self.exchange(endpoint, body, query, timeout, idempotent, retries, **params)[0]

    def fetch(self, endpoint: Endpoint[Any], body: Any = None, query: dict[str, Any] | None = None,
              timeout: float | None = None, idempotent: bool = False, retries: int | None = None,
              **params: str) -> Any:
        """Call ``endpoint``; the answer checked against its answer type but returned as plain JSON, every field
        the server sent kept (what ``htda --json`` prints)."""
        return self.exchange(endpoint, body, query, timeout, idempotent, retries, **params)[1]

    def exchange(self, endpoint: Endpoint[T], body: Any = None, query: dict[str, Any] | None = None,
                 timeout: float | None = None, idempotent: bool = False, retries: int | None = None,
                 **params: str) -> tuple[T, Any]:
        """Call ``endpoint``; the answer both typed (as :meth:`call` gives it) and as plain JSON (as :meth:`fetch`
        does): for a caller that reads the fields and prints the whole answer."""
        url, answer = self._send(endpoint, body, query, timeout, idempotent, retries, params)
        return self._checked(endpoint, answer, url), answer

    def _send(self, endpoint: Endpoint[Any], body: Any, query: dict[str, Any] | None, timeout: float | None,
              idempotent: bool, retries: int | None, params: dict[str, str]) -> tuple[str, Any]:
        url = endpoint.url(self.base_url, query, **params)
        if endpoint.method == "GET":
            return url, self.client.get(url, timeout=timeout, retries=retries)
        return url, self.client.post(url, to_wire(body) if body is not None else {}, timeout=timeout,
                                     idempotent=idempotent, retries=retries)

    @staticmethod
    def _checked(endpoint: Endpoint[T], answer: Any, url: str) -> T:
        if endpoint.response is None:
            return cast(T, answer)
        try:
            return check_answer(answer, endpoint.response)
        except ProtocolError as exc:
            raise BadResponse(f"{endpoint.method} {endpoint.path}: {exc}", url) from None


def _given(value: T | None) -> Any:
    return UNSET if value is None else value


class NodeClient(RoleClient):
    """Any node: identity, health, pool, heartbeats."""

    def info(self, **kw: Any) -> node.NodeInfo:
        return self.call(node.NODE, **kw)

    def pool(self, **kw: Any) -> node.PoolView:
        return self.call(node.POOL, **kw)

    def health(self, **kw: Any) -> node.Health:
        return self.call(node.HEALTH, **kw)

    def heartbeat(self, beat: node.Heartbeat, **kw: Any) -> node.HeartbeatAnswer:
        return self.call(node.HEARTBEAT, beat, idempotent=True, **kw)


class CoordinatorClient(RoleClient):
    """The coordinator, as submit agents, cache nodes, the CLI and the dashboard call it."""

    def jobs(self, jobs: list[coordinator.Job], **kw: Any) -> coordinator.JobsAnswer:
        return self.call(coordinator.JOBS, coordinator.JobsRequest(jobs=jobs), **kw)

    def events(self, events: list[coordinator.Event], **kw: Any) -> coordinator.EventsAnswer:
        return self.call(coordinator.EVENTS, coordinator.EventsRequest(events=events), **kw)

    def releases(self, node_name: str, lfns: list[str], reason: str | None = None,
                 **kw: Any) -> coordinator.ReleasesAnswer:
        body = coordinator.ReleasesRequest(node=node_name, lfns=lfns, reason=_given(reason))
        return self.call(coordinator.RELEASES, body, **kw)

    def reads(self, node_name: str, lfns: list[str], ttl: float, **kw: Any) -> coordinator.ReadsAnswer:
        return self.call(coordinator.READS, coordinator.ReadsRequest(node=node_name, lfns=lfns, ttl=ttl), **kw)

    def storage_reads(self, **kw: Any) -> coordinator.StorageReads:
        return self.call(coordinator.READING, **kw)

    def assignments(self, node_name: str, **kw: Any) -> coordinator.Assignments:
        return self.call(coordinator.ASSIGNMENTS, node=node_name, **kw)

    def top_files(self, n: int = 100, **kw: Any) -> coordinator.TopFiles:
        return self.call(coordinator.TOP_FILES, query={"n": n}, **kw)

    def top_groups(self, n: int = 100, **kw: Any) -> coordinator.TopGroups:
        return self.call(coordinator.TOP_GROUPS, query={"n": n}, **kw)

    def file(self, lfn: str, **kw: Any) -> coordinator.FileInfo:
        return self.call(coordinator.FILE, lfn=lfn, **kw)

    def nodes(self, **kw: Any) -> coordinator.NodesAnswer:
        return self.call(coordinator.NODES, **kw)

    def pin(self, pin: bool, lfns: list[str] | None = None, groups: list[str] | None = None,
            **kw: Any) -> coordinator.PinAnswer:
        return self.call(coordinator.PIN, coordinator.PinRequest(pin=pin, lfns=_given(lfns), groups=_given(groups)),
                         **kw)

    def pinned(self, **kw: Any) -> coordinator.Pinned:
        return self.call(coordinator.PINNED, **kw)

    def cycle(self, full: bool = False, **kw: Any) -> coordinator.CycleAnswer:
        return self.call(coordinator.CYCLE, coordinator.CycleRequest(full=full), **kw)

    def drain(self, node_name: str, draining: bool, **kw: Any) -> coordinator.DrainAnswer:
        return self.call(coordinator.DRAIN, coordinator.DrainRequest(draining=draining), node=node_name, **kw)


class LocatorClient(RoleClient):
    """A locator, as cache nodes report to it and submit agents, the CLI and the dashboard ask it."""

    def holdings(self, report: locator.HoldingsRequest, **kw: Any) -> locator.HoldingsAnswer:
        return self.call(locator.HOLDINGS, report, **kw)

    def lookup(self, lfns: list[str], **kw: Any) -> locator.LookupAnswer:
        return self.call(locator.LOOKUP, locator.LookupRequest(lfns=lfns), **kw)

    def file(self, lfn: str, **kw: Any) -> locator.HeldFile:
        return self.call(locator.FILE, lfn=lfn, **kw)

    def nodes(self, **kw: Any) -> locator.LocatorNodes:
        return self.call(locator.NODES, **kw)


class CacheClient(RoleClient):
    """A cache node's admin endpoints."""

    def files(self, limit: int = 1000, offset: int = 0, **kw: Any) -> cache.CacheFiles:
        return self.call(cache.FILES, query={"limit": limit, "offset": offset} if offset else {"limit": limit},
                         **kw)

    def devices(self, **kw: Any) -> cache.Devices:
        return self.call(cache.DEVICES, **kw)

    def staging(self, **kw: Any) -> cache.Staging:
        return self.call(cache.STAGING, **kw)

    def evictions(self, **kw: Any) -> cache.Evictions:
        return self.call(cache.EVICTIONS, **kw)

    def view(self, **kw: Any) -> cache.ViewInfo:
        return self.call(cache.VIEW, **kw)

    def cycle(self, **kw: Any) -> cache.CacheCycle:
        return self.call(cache.CYCLE, cache.CacheCycleRequest(), **kw)

    def evict(self, lfns: list[str], **kw: Any) -> cache.EvictAnswer:
        return self.call(cache.EVICT, cache.EvictRequest(lfns=lfns), **kw)

"""The pool summary the dashboard page shows, gathered from the pool's members.

Everything comes from what members already publish: the member list with
its heartbeat facts (cache usage, staging counts, the locators' lookups and
hits), the coordinator's top files and each cache node's staging queue.  Calls to other members run in parallel with a
short timeout; a member that does not answer shows up as an error in its
part of the page, never as a failed page.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

from ..node.client import ClientError
from ..protocol import cache, coordinator
from ..protocol.base import Endpoint
from ..protocol.cache import CacheFacts
from ..protocol.clients import CacheClient, CoordinatorClient, RoleClient
from ..protocol.dashboard import Failing, Hits, MemberRow, NodeStaging, Summary, TopFilesPart, Totals
from ..protocol.locator import LocatorFacts
from ..protocol.node import member_facts

if TYPE_CHECKING:
    from ..node.runtime import Node

__all__ = ["SummaryBuilder"]

T = TypeVar("T")


class SummaryBuilder:
    """Builds the summary; ``top`` files listed, ``timeout`` per call to another member."""

    def __init__(self, node: "Node", timeout: float, top: int, workers: int = 8):
        self.node, self.timeout, self.top = node, timeout, top
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="htda-dashboard")

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def build(self) -> Summary:
        members = self.node.pool_snapshot()
        caches = [m for m in members if "cache" in m["roles"]]
        coordinators = [m for m in members if "coordinator" in m["roles"]]
        locators = [m for m in members if "locator" in m["roles"]]
        staging = {m["name"]: self._pool.submit(self._get, CacheClient(self.node.client, m["url"]), cache.STAGING)
                   for m in caches}
        top = self._pool.submit(self._top_files, coordinators)
        return Summary(
            node=self.node.node_info(),
            time=self.node.clock.time(),
            heartbeat_interval=self.node.heartbeat_interval,
            expiry=self.node.member_expiry,
            members=[self._member(m) for m in members],
            totals=_totals(caches),
            staging=[_staging(name, future.result()) for name, future in sorted(staging.items())],
            top_files=top.result(),
            hits=_hit_ratio(locators),
        )

    # -- parts -----------------------------------------------------------------------
    def _member(self, m: dict[str, Any]) -> MemberRow:
        late = m["age"] > 2 * self.node.heartbeat_interval
        return MemberRow(name=m["name"], url=m["url"], roles=m["roles"], version=m["version"], age=m["age"],
                         started=m["started"], health="late" if late else "ok",
                         cache=member_facts(m, "cache", CacheFacts))

    def _get(self, client: RoleClient, endpoint: Endpoint[T], query: dict[str, Any] | None = None) -> T | str:
        """A member's answer (checked against and converted to the endpoint's answer type), or the error of asking
        it."""
        try:
            return client.call(endpoint, query=query, timeout=self.timeout, retries=0)
        except ClientError as exc:
            return str(exc)

    def _top_files(self, coordinators: list[dict[str, Any]]) -> TopFilesPart:
        if not coordinators:
            return TopFilesPart(error="no coordinator in the pool")
        error = ""
        for member in coordinators:  # the first that answers wins, like the cache nodes do
            answer = self._get(CoordinatorClient(self.node.client, member["url"]), coordinator.TOP_FILES,
                               {"n": self.top})
            if not isinstance(answer, str):
                return TopFilesPart(coordinator=member["name"], files=answer.files)
            error = answer
        return TopFilesPart(error=error)


def _totals(caches: list[dict[str, Any]]) -> Totals:
    """The cache nodes' heartbeat facts summed (a node whose facts do not fit adds nothing but its count)."""
    facts = [f for m in caches if (f := member_facts(m, "cache", CacheFacts)) is not None]
    sums = {field: sum(getattr(f, field) for f in facts) for field in CacheFacts.__struct_fields__}
    return Totals(cache_nodes=len(caches), **sums)


def _staging(name: str, answer: cache.Staging | str) -> NodeStaging:
    if isinstance(answer, str):
        return NodeStaging(node=name, error=answer)
    failing = [Failing(lfn=f.lfn, attempts=f.attempt, error=f.error, permanent=f.permanent) for f in answer.failed]
    return NodeStaging(node=name, active=answer.active, queued=len(answer.queued), failed=len(failing),
                       failing=failing)


def _hit_ratio(locators: list[dict[str, Any]]) -> Hits | None:
    """LFNs the locators were asked for and found held, from their heartbeat facts (None: no locator says)."""
    facts = [f for m in locators if (f := member_facts(m, "locator", LocatorFacts)) is not None]
    if not facts:
        return None
    looked_up = sum(f.looked_up for f in facts)
    held = sum(f.held for f in facts)
    return Hits(looked_up=looked_up, held=held, ratio=held / looked_up if looked_up else None)

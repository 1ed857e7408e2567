"""The pool summary the dashboard page shows, gathered from the pool's members.

Everything comes from what members already publish: the member list with
its heartbeat facts (cache usage, staging counts, the locators' lookups and
hits), the coordinator's top files and each cache node's staging queue.  Calls to other members run in parallel with a
short timeout; a member that does not answer shows up as an error in its
part of the page, never as a failed page.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from ..node.client import ClientError
from ..protocol import cache, coordinator
from ..protocol.base import Endpoint, to_wire
from ..protocol.clients import CacheClient, CoordinatorClient, RoleClient

if TYPE_CHECKING:
    from ..node.runtime import Node

__all__ = ["SummaryBuilder"]

class SummaryBuilder:
    """Builds the summary; ``top`` files listed, ``timeout`` per call to another member."""

    def __init__(self, node: "Node", timeout: float, top: int, workers: int = 8):
        self.node, self.timeout, self.top = node, timeout, top
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="htda-dashboard")

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def build(self) -> dict[str, Any]:
        members = self.node.pool_snapshot()
        caches = [m for m in members if "cache" in m["roles"]]
        coordinators = [m for m in members if "coordinator" in m["roles"]]
        locators = [m for m in members if "locator" in m["roles"]]
        staging = {m["name"]: self._pool.submit(self._get, CacheClient(self.node.client, m["url"]), cache.STAGING)
                   for m in caches}
        top = self._pool.submit(self._top_files, coordinators)
        return {
            "node": to_wire(self.node.node_info()),
            "time": self.node.clock.time(),
            "heartbeat_interval": self.node.heartbeat_interval,
            "expiry": self.node.member_expiry,
            "members": [self._member(m) for m in members],
            "totals": _totals(caches),
            "staging": [_staging(name, future.result()) for name, future in sorted(staging.items())],
            "top_files": top.result(),
            "hits": _hit_ratio(locators),
        }

    # -- parts -----------------------------------------------------------------------
    def _member(self, m: dict[str, Any]) -> dict[str, Any]:
        late = m["age"] > 2 * self.node.heartbeat_interval
        return {"name": m["name"], "url": m["url"], "roles": m["roles"], "version": m["version"],
                "age": m["age"], "started": m["started"], "health": "late" if late else "ok",
                "cache": (m.get("info") or {}).get("cache")}

    def _get(self, client: RoleClient, endpoint: Endpoint[Any], query: dict[str, Any] | None = None) -> dict[str, Any]:
        """A member's JSON answer (checked against the endpoint's answer type), or ``{"error": ...}``."""
        return _guarded(lambda: client.fetch(endpoint, query=query, timeout=self.timeout, retries=0))

    def _top_files(self, coordinators: list[dict[str, Any]]) -> dict[str, Any]:
        if not coordinators:
            return {"error": "no coordinator in the pool"}
        answer: dict[str, Any] = {}
        for member in coordinators:  # the first that answers wins, like the cache nodes do
            answer = self._get(CoordinatorClient(self.node.client, member["url"]), coordinator.TOP_FILES,
                               {"n": self.top})
            if "error" not in answer:
                return {"coordinator": member["name"], "files": answer.get("files", [])}
        return answer


def _guarded(call: Callable[[], Any]) -> dict[str, Any]:
    try:
        answer = call()
    except ClientError as exc:
        return {"error": str(exc)}
    return answer if isinstance(answer, dict) else {"error": "unexpected answer"}


def _totals(caches: list[dict[str, Any]]) -> dict[str, int]:
    facts = [(m.get("info") or {}).get("cache") or {} for m in caches]
    keys = ("capacity_bytes", "used_bytes", "free_bytes", "files", "staging")
    return {"cache_nodes": len(caches), **{k: sum(int(f.get(k) or 0) for f in facts) for k in keys}}


def _staging(name: str, answer: dict[str, Any]) -> dict[str, Any]:
    if "error" in answer:
        return {"node": name, "error": answer["error"]}
    failing = [{"lfn": f.get("lfn"), "attempts": f.get("attempt"), "error": f.get("error"),
                "permanent": f.get("permanent")} for f in answer.get("failed") or [] if isinstance(f, dict)]
    return {"node": name, "active": answer.get("active", []), "queued": len(answer.get("queued", [])),
            "failed": len(failing), "failing": failing}


def _hit_ratio(locators: list[dict[str, Any]]) -> dict[str, Any] | None:
    """LFNs the locators were asked for and found held, from their heartbeat facts (None: no locator says)."""
    facts = [info for m in locators if isinstance(info := (m.get("info") or {}).get("locator"), dict)
             and "looked_up" in info]
    if not facts:
        return None
    files = sum(int(f["looked_up"]) for f in facts)
    hits = sum(int(f.get("held") or 0) for f in facts)
    return {"looked_up": files, "held": hits, "ratio": hits / files if files else None}

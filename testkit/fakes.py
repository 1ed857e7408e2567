"""The one stand-in for other roles in tests and benches: a real REST server speaking :mod:`htda.protocol`.

A :class:`StandIn` serves the endpoints it is given through the node's own REST layer, so a request is decoded
and checked with the endpoint's request type exactly as the real server does it (a 400 naming the field), and
every answer a test's handler makes is checked against the endpoint's answer type before it goes: a stand-in
cannot drift from the contract unnoticed (:attr:`StandIn.problems`; :meth:`StandIn.stop` raises on any).

:class:`PeerStandIn` (a coordinator and locator for the cache's tests), :class:`RecordingCoordinator` (what the
submit agent publishes) and :class:`PoolStandIn` (a member of an older or partial pool, for the CLI) are built on
it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from htda.node.auth import Verifier
from htda.node.rest import Request, Response, RestApp, RestServer, Route
from htda.protocol import coordinator, locator, node
from htda.protocol.base import Endpoint, ProtocolError, check_answer, to_wire
from testkit.nodes import SECRET

__all__ = ["PeerStandIn", "PoolStandIn", "RecordingCoordinator", "StandIn"]

Handler = Callable[[Request], Any]


class StandIn:
    """A REST server for ``endpoints`` ({endpoint: handler}); handlers read ``request.data`` (the decoded body)."""

    def __init__(self, endpoints: dict[Endpoint[Any], Handler], secret: bytes = SECRET.encode(),
                 read_networks: tuple[str, ...] = ("127.0.0.0/8",), threads: int = 4, port: int = 0):
        self.problems: list[str] = []
        self.app = RestApp(Verifier(secret), list(read_networks))
        self.add(endpoints)
        self.server = RestServer(self.app, "127.0.0.1", port, threads=threads)
        self.url = ""

    def add(self, endpoints: dict[Endpoint[Any], Handler]) -> None:
        self.app.add([Route.of(endpoint, self._checked(endpoint, handler), f"stand-in for {endpoint.path}")
                      for endpoint, handler in endpoints.items()])

    def _checked(self, endpoint: Endpoint[Any], handler: Handler) -> Handler:
        def serve(request: Request) -> Any:
            answer = handler(request)
            if endpoint.response is not None and not isinstance(answer, Response):
                try:
                    check_answer(answer, endpoint.response, f"{endpoint.method} {endpoint.path} answer")
                except ProtocolError as exc:
                    self.problems.append(str(exc))
                    raise AssertionError(f"the stand-in's answer breaks the contract: {exc}") from None
            return answer

        return serve

    def start(self) -> StandIn:
        self.server.start()
        self.url = f"http://127.0.0.1:{self.server.port}"
        return self

    def stop(self) -> None:
        self.server.stop()
        assert not self.problems, f"stand-in answers that break the contract: {self.problems}"


class PeerStandIn(StandIn):
    """A coordinator and locator for the cache's tests: serves a fixed assignment, records releases, storage
    reads and holdings, and checks signatures with the node runtime's own verifier, like the real ones."""

    def __init__(self, secret: bytes):
        self.files: list[dict] = []
        self.draining = False
        self.groups: list[list[int]] = []  # hot input groups given whole, as positions in files
        self.releases: list[dict] = []
        self.holdings: list[dict] = []
        self.held: dict[str, int] = {}
        self.reads: list[dict] = []
        #: set by every assignment request (clear it to wait for the next)
        self.asked = threading.Event()
        #: assignments are answered while set; clear it to hold them (a cache cycle waits in its pull) until set
        self.answering = threading.Event()
        self.answering.set()
        super().__init__({coordinator.ASSIGNMENTS: self._assignments, coordinator.RELEASES: self._releases,
                          coordinator.READS: self._reads, locator.HOLDINGS: self._holdings}, secret)

    def assign(self, files: list[tuple[str, float]] | list[dict], draining: bool = False,
               groups: list[list[int]] | None = None) -> None:
        self.files = [f if isinstance(f, dict) else {"lfn": f[0], "score": f[1], "size": None, "source": None}
                      for f in files]
        self.draining = draining
        self.groups = groups or []

    def _assignments(self, request: Request) -> dict:
        self.asked.set()
        self.answering.wait(30)
        return {"node": request.params["node"], "cycle": 1, "files": self.files, "draining": self.draining,
                "groups": self.groups}

    def _releases(self, request: Request) -> dict:
        self.releases.append(to_wire(request.data))
        return {"released": len(request.data.lfns)}

    def _reads(self, request: Request) -> dict:
        self.reads.append(to_wire(request.data))
        return {"reported": len(request.data.lfns)}

    def _holdings(self, request: Request) -> dict:
        body: locator.HoldingsRequest = request.data
        self.holdings.append(to_wire(body))
        if body.replace:
            self.held = {}
        for lfn in body.removed or []:
            self.held.pop(lfn, None)
        self.held.update({f.lfn: f.size for f in body.files})
        return {"files": len(self.held)}


class RecordingCoordinator(StandIn):
    """The coordinator's jobs and events endpoints, keeping what they are sent (as plain JSON)."""

    def __init__(self) -> None:
        self.jobs: list[dict] = []
        self.events: list[dict] = []
        self.lock = threading.Lock()
        super().__init__({coordinator.JOBS: self._jobs, coordinator.EVENTS: self._events}, read_networks=())

    def _jobs(self, request: Request) -> dict:
        jobs = request.data.jobs
        with self.lock:
            self.jobs.extend(to_wire(jobs))
        return {"accepted": len(jobs), "duplicates": 0}

    def _events(self, request: Request) -> dict:
        events = request.data.events
        with self.lock:
            self.events.extend(to_wire(events))
        return {"accepted": len(events), "duplicates": 0, "unknown": 0, "refused": 0}


class PoolStandIn(StandIn):
    """One member (``old``) with ``roles`` answering only ``GET /pool``, plus the ``extra`` endpoints given: a
    node of an older or partial pool."""

    def __init__(self, roles: list[str], extra: dict[Endpoint[Any], Handler] | None = None):
        super().__init__({node.POOL: self._pool, **(extra or {})}, threads=2)
        self.roles = roles

    def _pool(self, request: Request) -> dict:
        member = {"name": "old", "url": self.url, "roles": self.roles, "version": "0.0", "started": 0.0, "age": 0.0,
                  "info": {}}
        return {"self": "old", "members": [member]}

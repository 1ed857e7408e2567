"""htda.protocol: bodies decoded with 400-ready messages, endpoints' URLs, typed clients, the shared stand-in."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from htda.node.client import BadResponse, Client, HTTPStatusError
from htda.protocol import cache, coordinator, locator, node, paths
from htda.protocol.base import UNSET, ProtocolError, check_answer, decode, encode, to_wire
from htda.protocol.clients import CoordinatorClient, LocatorClient
from testkit.fakes import StandIn
from testkit.nodes import SECRET


def _error(raw: bytes, kind) -> str:
    with pytest.raises(ProtocolError) as err:
        decode(raw, kind)
    return str(err.value)


@pytest.mark.parametrize("body, message", [
    ({"jobs": [{"job_id": "j", "owner": "a", "inputs": [], "colour": "red"}]}, "body.jobs[0]: unknown field 'colour'"),
    ({"jobs": [{"job_id": "j", "owner": "a"}]}, "body.jobs[0]: missing field 'inputs'"),
    ({"jobs": [{"job_id": "", "owner": "a", "inputs": []}]}, "body.jobs[0].job_id: Expected `str` of length >= 1"),
    ({"jobs": [{"job_id": "j", "owner": "a", "inputs": [], "cpus": True}]},
     "body.jobs[0].cpus: Expected `int`, got `bool`"),
    ({"jobs": [{"job_id": "j", "owner": "a", "inputs": [], "cpus": None}]},
     "body.jobs[0].cpus: Expected `int`, got `null`"),  # left out is fine, null is not (as before)
    ({"jobs": "many"}, "body.jobs: Expected `array`, got `str`"),
])
def test_bad_bodies_name_the_place(body, message):
    assert _error(json.dumps(body).encode(), coordinator.JobsRequest) == message


def test_an_enum_lists_its_values_and_bad_json_says_so():
    raw = b'{"events": [{"job_id": "j", "state": "exploded", "time": 1}]}'
    assert _error(raw, coordinator.EventsRequest).endswith("must be one of finished, removed, started")
    assert _error(b"", coordinator.EventsRequest) == "request body must be JSON"
    assert _error(b"{", coordinator.EventsRequest).startswith("request body is not valid JSON")
    assert _error(b'{"lfns": NaN}', locator.LookupRequest).startswith("request body is not valid JSON")
    assert "nested too deeply" in _error(b'{"name": "a", "url": "http://a", "roles": [], "version": "", '
                                         b'"started": 0, "info": {"x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}}",
                                         node.Heartbeat)


def test_fields_left_out_stay_out_on_the_wire():
    request = coordinator.ReleasesRequest(node="w1", lfns=["/a"])
    assert request.reason is UNSET
    assert json.dumps(to_wire(request)) == '{"node": "w1", "lfns": ["/a"]}'
    assert to_wire(decode(b'{"node":"w1","lfns":["/a"],"reason":"full"}', coordinator.ReleasesRequest)) == {
        "node": "w1", "lfns": ["/a"], "reason": "full"}


def test_encode_writes_what_to_wire_gives():
    answer = coordinator.Assignments(node="w1", cycle=3, files=[
        coordinator.AssignedFile(lfn="/a", score=0.5, size=None, source=None),
        coordinator.AssignedFile(lfn="/b", score=1e-7, size=10, source=None, peers=["w2"], peers_only=True)])
    written = json.loads(encode(answer))
    assert written == to_wire(answer) and list(written) == ["node", "cycle", "files", "draining", "groups"]
    assert "peers" not in written["files"][0] and written["files"][1]["peers"] == ["w2"]  # unset: left out


def test_member_facts_are_typed_or_none():
    facts = {"used_bytes": 1, "free_bytes": 2, "capacity_bytes": 3, "files": 4, "staging": 0}
    assert node.member_facts({"info": {"cache": facts}}, "cache", cache.CacheFacts) == cache.CacheFacts(**facts)
    assert node.member_facts({"info": {"locator": {}}}, "cache", cache.CacheFacts) is None  # says nothing
    assert node.member_facts({"name": "old"}, "cache", cache.CacheFacts) is None  # no info at all
    older = {k: v for k, v in facts.items() if k != "staging"}
    assert node.member_facts({"info": {"cache": older}}, "cache", cache.CacheFacts) is None  # does not fit


def test_answers_tolerate_new_fields_but_not_missing_ones():
    answer = check_answer({"accepted": 1, "duplicates": 0, "later": True}, coordinator.JobsAnswer)
    assert answer.accepted == 1
    with pytest.raises(ProtocolError, match="answer: missing field 'duplicates'"):
        check_answer({"accepted": 1}, coordinator.JobsAnswer)


def test_endpoint_urls_quote_their_parameters():
    assert coordinator.DRAIN.url("http://h:1/", node="a b/c") == "http://h:1/api/v1/coordinator/nodes/a%20b%2Fc/drain"
    assert coordinator.FILE.url("", {"limit": 3}, lfn="/store/a b.root") == \
        "/api/v1/coordinator/files/store/a%20b.root?limit=3"
    assert cache.FILES.path == paths.CACHE_FILES and locator.LOOKUP.method == "POST"


def test_paths_import_nothing():
    """The hooks import the paths on every job: the module must not pull in msgspec or the node runtime."""
    probe = ("import sys, htda.protocol.paths; "
             "print(sorted(m for m in sys.modules if m.startswith(('htda', 'msgspec'))))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['htda', 'htda.protocol', 'htda.protocol.paths']"


@pytest.fixture
def standin():
    servers = []

    def make(endpoints):
        servers.append(StandIn(endpoints).start())
        return servers[-1]

    yield make
    for server in servers:
        server.server.stop()


def test_typed_clients_send_and_check(standin):
    seen = []
    peer = standin({coordinator.RELEASES: lambda r: seen.append(r.data) or {"released": len(r.data.lfns)},
                    locator.LOOKUP: lambda r: {"files": {lfn: ["w1"] for lfn in r.data.lfns},
                                               "nodes": {"w1": {"files": 1, "bytes": 5, "fraction": 1.0}}}})
    client = Client(SECRET.encode())
    assert CoordinatorClient(client, peer.url).releases("w1", ["/a"]).released == 1
    assert seen[0].reason is UNSET
    answer = LocatorClient(client, peer.url).lookup(["/a"])
    assert answer.files == {"/a": ["w1"]} and answer.nodes["w1"].fraction == 1.0


def test_exchange_gives_the_typed_answer_and_every_field_sent(standin):
    peer = standin({coordinator.PINNED: lambda r: {"files": [{"lfn": "/a", "node": None, "later": 1}]}})
    client = CoordinatorClient(Client(SECRET.encode()), peer.url)
    typed, plain = client.exchange(coordinator.PINNED)
    assert typed == coordinator.Pinned(files=[coordinator.PinnedFile(lfn="/a", node=None)])
    assert plain == {"files": [{"lfn": "/a", "node": None, "later": 1}]} == client.fetch(coordinator.PINNED)
    assert client.pinned() == typed


def test_the_standin_refuses_bad_requests_and_its_own_bad_answers(standin):
    peer = standin({coordinator.JOBS: lambda r: {"accepted": len(r.data.jobs)}})  # forgot "duplicates"
    client = Client(SECRET.encode(), retries=0)
    with pytest.raises(HTTPStatusError) as err:
        client.post(peer.url + paths.JOBS, {"jobs": [{"job_id": "j", "owner": "a", "inputs": [], "x": 1}]})
    assert err.value.status == 400 and "body.jobs[0]: unknown field 'x'" in str(err.value)
    with pytest.raises(HTTPStatusError) as err:  # the stand-in's own drift is a 500 and a recorded problem
        CoordinatorClient(client, peer.url).jobs([coordinator.Job(job_id="j", owner="a", inputs=[])])
    assert err.value.status == 500
    assert peer.problems == ["POST /api/v1/coordinator/jobs answer: missing field 'duplicates'"]
    peer.problems.clear()


def test_a_client_refuses_an_answer_that_breaks_the_contract(standin):
    class Lenient(StandIn):
        def _checked(self, endpoint, handler):
            return handler  # a server of another version: answers are not checked on its side

    peer = Lenient({coordinator.ASSIGNMENTS: lambda r: {"node": "w1", "files": "all"}}).start()
    try:
        with pytest.raises(BadResponse, match="answer.files: Expected `array`, got `str`"):
            CoordinatorClient(Client(SECRET.encode()), peer.url).assignments("w1")
    finally:
        peer.stop()


def _endpoints() -> set[tuple[str, str]]:
    from htda.protocol import dashboard
    from htda.protocol.base import Endpoint

    modules = (node, coordinator, locator, cache, dashboard)
    return {(e.method, e.path) for m in modules for e in vars(m).values() if isinstance(e, Endpoint)}


def test_every_route_serves_an_endpoint_of_the_protocol(inprocess_node, tmp_path):
    """No path is spelled anywhere else: an all-in-one node's routes are exactly endpoints of htda.protocol, every
    body has a type, every JSON answer has one."""
    from htda.node.runtime import load_config
    from tests.conftest import ALL_IN_ONE

    aio = inprocess_node("aio", load_config(ALL_IN_ONE)["node"]["components"],
                         sections={"submit": {"socket": str(tmp_path / "submit.sock")}})
    routes = aio.app.routes
    assert {(r.method, r.path) for r in routes} <= _endpoints()
    assert all(r.body is not None for r in routes if r.method == "POST")
    assert not [r.path for r in routes if r.content_type == "application/json" and r.response is None]

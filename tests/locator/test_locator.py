"""The locator against real nodes on loopback: reports, lookups, admin queries, pool departures."""

from __future__ import annotations

import pytest

from htda.node.client import HTTPStatusError
from htda.protocol.paths import HOLDINGS, LOOKUP
from testkit.clock import FakeClock
from testkit.http import raw as raw_request
from testkit.nodes import heartbeat, wait_until


@pytest.fixture
def locator(inprocess_node):
    return inprocess_node("loc", ["locator"], sections={"locator": {"sweep_interval": 0.2}})




def report(client, node, holder, files, replace=True, removed=None):
    body = {"node": holder, "files": [{"lfn": lfn, "size": size} for lfn, size in files.items()],
            "replace": replace}
    if removed is not None:
        body["removed"] = removed
    return client.post(node.url + HOLDINGS, body)


def test_lookup_gives_holders_and_byte_fractions(locator, signed, anonymous):
    report(signed, locator, "c1", {"/a": 300, "/b": 100})
    report(signed, locator, "c2", {"/b": 100, "/c": 600})
    answer = anonymous.post(locator.url + LOOKUP, {"lfns": ["/a", "/b", "/c", "/a"]})
    assert {lfn: sorted(nodes) for lfn, nodes in answer["files"].items()} == {
        "/a": ["c1"], "/b": ["c1", "c2"], "/c": ["c2"]}
    assert answer["nodes"]["c1"] == {"files": 2, "bytes": 400, "fraction": 0.4}
    assert answer["nodes"]["c2"] == {"files": 2, "bytes": 700, "fraction": 0.7}


def test_unheld_files_count_as_the_mean_held_size(locator, signed, anonymous):
    report(signed, locator, "c1", {"/a": 100, "/b": 300})
    answer = anonymous.post(locator.url + LOOKUP, {"lfns": ["/a", "/b", "/x", "/y"]})
    assert answer["files"]["/x"] == [] and answer["files"]["/y"] == []
    assert answer["nodes"]["c1"]["fraction"] == pytest.approx(400 / 800)
    nobody = anonymous.post(locator.url + LOOKUP, {"lfns": ["/x"]})
    assert nobody == {"files": {"/x": []}, "nodes": {}}


def test_lookup_answers_with_the_lfn_as_asked_and_matches_its_canonical_form(locator, signed, anonymous):
    report(signed, locator, "c1", {"/store/f.root": 10})
    answer = anonymous.post(locator.url + LOOKUP, {"lfns": ["store//f.root"]})
    assert answer["files"] == {"store//f.root": ["c1"]}


def test_replace_is_complete_and_delta_adds_and_removes(locator, signed, anonymous):
    report(signed, locator, "c1", {"/a": 1, "/b": 2})
    report(signed, locator, "c1", {"/b": 2, "/c": 3})
    assert anonymous.post(locator.url + LOOKUP, {"lfns": ["/a"]})["files"]["/a"] == []
    assert report(signed, locator, "c1", {"/d": 4}, replace=False, removed=["/b"]) == {"files": 2}
    files = anonymous.post(locator.url + LOOKUP, {"lfns": ["/b", "/c", "/d"]})["files"]
    assert files == {"/b": [], "/c": ["c1"], "/d": ["c1"]}
    assert anonymous.get(locator.url + "/api/v1/locator/nodes")["nodes"]["c1"]["bytes"] == 7


def test_admin_queries(locator, signed, anonymous):
    report(signed, locator, "c1", {"/store/x.root": 5})
    report(signed, locator, "c2", {"/store/x.root": 5})
    assert anonymous.get(locator.url + "/api/v1/locator/files/store/x.root") == {
        "lfn": "/store/x.root", "nodes": {"c1": 5, "c2": 5}}
    with pytest.raises(HTTPStatusError) as err:
        anonymous.get(locator.url + "/api/v1/locator/files/store/none.root")
    assert err.value.status == 404
    nodes = anonymous.get(locator.url + "/api/v1/locator/nodes")["nodes"]
    assert set(nodes) == {"c1", "c2"} and nodes["c1"]["files"] == 1


def test_holdings_need_a_signature_lookups_do_not(locator, anonymous):
    with pytest.raises(HTTPStatusError) as err:
        report(anonymous, locator, "c1", {"/a": 1})
    assert err.value.status == 401


@pytest.mark.parametrize("body", [
    {"node": "c1", "files": [{"lfn": "/../etc/passwd", "size": 1}], "replace": True},
    {"node": "c1", "files": [{"lfn": "/a", "size": -1}], "replace": True},
    {"node": "c1", "files": [], "replace": True, "removed": ["/a"]},
    {"node": "c1", "files": [], "replace": False, "removed": ["/a/./b"]},
    {"node": "c1", "files": [{"lfn": "/a"}], "replace": True},
    {"node": "c1", "files": [], "replace": True, "extra": 1},
])
def test_bad_holdings_are_refused_with_400(locator, signed, body):
    with pytest.raises(HTTPStatusError) as err:
        signed.post(locator.url + HOLDINGS, body)
    assert err.value.status == 400


@pytest.mark.parametrize("raw", [
    b"not json", b"[]", b'{"lfns": "/a"}', b'{"lfns": [1]}', b'{"lfns": ["/a"], "x": 1}',
    b'{"lfns": ["/a/../../b"]}', b'{"lfns": ["/a\\u0000b"]}', b'{"lfns": [""]}',
])
def test_bad_lookups_are_refused_with_400(locator, anonymous, raw):
    status, body = raw_request("POST", locator.url + LOOKUP, raw, ["Content-Type: application/json"])
    assert status == 400, body


def test_lookup_limit(inprocess_node, anonymous):
    node = inprocess_node("small", ["locator"], sections={"locator": {"max_lookup": 3}})
    assert len(anonymous.post(node.url + LOOKUP, {"lfns": ["/a", "/b", "/c"]})["files"]) == 3
    with pytest.raises(HTTPStatusError) as err:
        anonymous.post(node.url + LOOKUP, {"lfns": ["/a", "/b", "/c", "/d"]})
    assert err.value.status == 400


def holders(client, node, lfn: str) -> list[str]:
    return client.post(node.url + LOOKUP, {"lfns": [lfn]})["files"][lfn]


def test_entries_of_a_node_that_leaves_the_pool_are_dropped(inprocess_node, signed, anonymous):
    clock = FakeClock()
    locator = inprocess_node("loc", ["locator"], clock=clock, expiry=1.5)
    heartbeat(signed, locator.url, "cache1", ["cache"])
    report(signed, locator, "cache1", {"/a": 1})
    assert holders(anonymous, locator, "/a") == ["cache1"]
    clock.advance(1.5)  # silent for exactly the expiry: still a member
    assert "cache1" in {m.name for m in locator.members()}
    assert holders(anonymous, locator, "/a") == ["cache1"]
    clock.advance(0.01)
    assert "cache1" not in {m.name for m in locator.members()}  # the pool drops it, and the locator its entries
    assert holders(anonymous, locator, "/a") == []


def test_reports_of_nodes_outside_the_pool_are_swept(inprocess_node, signed, anonymous):
    clock = FakeClock()
    node = inprocess_node("loc", ["locator"], clock=clock,
                          sections={"locator": {"sweep_interval": 0.05, "unknown_grace": 30.0}})
    sweeper = node.component("locator")
    report(signed, node, "ghost", {"/a": 1})
    report(signed, node, "loc", {"/b": 1})  # the locator itself is a member: kept
    assert sweeper.sweep() == [] and holders(anonymous, node, "/a") == ["ghost"]  # first seen outside the pool
    clock.advance(29.9)
    assert sweeper.sweep() == [] and holders(anonymous, node, "/a") == ["ghost"]
    clock.advance(0.2)  # past the grace: the sweeper thread drops the ghost at its next pass
    wait_until(lambda: holders(anonymous, node, "/a") == [], timeout=5, what="the sweeper's next pass")
    assert holders(anonymous, node, "/b") == ["loc"]


def test_metrics_count_lookups(locator, signed, anonymous):
    report(signed, locator, "c1", {"/a": 1})
    anonymous.post(locator.url + LOOKUP, {"lfns": ["/a", "/b"]})
    status, raw = raw_request("GET", locator.url + "/metrics")
    metrics = raw.decode()
    assert status == 200
    assert "htda_locator_lookup_files_total 2" in metrics
    assert "htda_locator_lookup_hits_total 1" in metrics
    assert "htda_locator_files 1" in metrics

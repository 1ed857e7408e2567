"""The dashboard component's routes: the page, its files, access rules and the pool summary."""

from __future__ import annotations

import pytest

from htda.node.client import Client
from htda.node.rest import API
from htda.protocol import dashboard
from htda.protocol.base import check_answer, to_wire
from testkit.http import raw as raw_request
from testkit.nodes import wait_until


@pytest.fixture
def service(inprocess_node):
    return inprocess_node("svc", ["coordinator", "locator", "dashboard"])


def test_page_and_static_files(service):
    status, page = raw_request("GET", f"{service.url}/dashboard")
    assert status == 200 and b"<title>HTDA pool</title>" in page
    assert b'data-settings="{&quot;refresh&quot;: 3.0}"' in page
    for name, marker in (("app.js", b"/api/v1/dashboard/summary"), ("style.css", b".meter")):
        status, body = raw_request("GET", f"{service.url}/dashboard/static/{name}")
        assert status == 200 and marker in body


@pytest.mark.parametrize("name", ["index.html", "..%2F..%2Fsetup.py", "%2e%2e", "nope.js", "..", "cli.py"])
def test_only_the_pages_files_are_served(service, name):
    status, _ = raw_request("GET", f"{service.url}/dashboard/static/{name}")
    assert status == 404


def test_page_carries_a_content_security_policy(service):
    import pycurl

    curl = pycurl.Curl()
    headers: list[bytes] = []
    curl.setopt(pycurl.URL, f"{service.url}/dashboard")
    curl.setopt(pycurl.HEADERFUNCTION, headers.append)
    curl.setopt(pycurl.WRITEFUNCTION, lambda data: None)
    curl.perform()
    curl.close()
    text = b"".join(headers).decode().lower()
    assert "content-security-policy: default-src 'self'" in text
    assert "x-content-type-options: nosniff" in text


@pytest.mark.parametrize("public,expected", [(False, 401), (True, 200)])
def test_access_outside_the_read_networks(inprocess_node, public, expected):
    node = inprocess_node("private", ["dashboard"], sections={"dashboard": {"public": public}}, read_networks=[])
    assert raw_request("GET", f"{node.url}/dashboard")[0] == expected
    assert raw_request("GET", f"{node.url}{API}/dashboard/summary")[0] == expected


def test_summary_of_a_live_pool(service, inprocess_node, tmp_path):
    (tmp_path / "storage").mkdir()
    worker = inprocess_node("w1", ["cache"], seeds=[service.url],
                            sections={"cache": {"devices": [{"path": "c1", "capacity": 1 << 20, "high_watermark": 1.0,
                                                             "low_watermark": 1.0}], "cycle": 60.0,
                                                "storage_location": str(tmp_path / "storage")}})
    wait_until(lambda: (service.pool.member("w1") or None) and service.pool.member("w1").info.get("cache"),
               what="w1's cache facts")
    service.client.post(f"{service.url}{API}/coordinator/jobs",
                        {"jobs": [{"job_id": "j", "owner": "o", "inputs": ["/store/x.root"],
                                   "sizes": {"/store/x.root": 1000}}]})
    service.client.post(f"{service.url}{API}/coordinator/events",
                        {"events": [{"job_id": "j", "state": "started", "time": 1.0}]})
    service.client.post(f"{service.url}{API}/locator/lookup", {"lfns": ["/store/x.root", "/store/y.root"]})
    # the locator's counts come with its next heartbeat
    summary = wait_until(lambda: (s := Client().get(f"{service.url}{API}/dashboard/summary"))["top_files"].get("files")
                         and (s["hits"] or {}).get("looked_up") and s, what="a rated file and the lookups")
    assert [m["name"] for m in summary["members"]] == ["svc", "w1"]
    assert summary["totals"]["cache_nodes"] == 1 and summary["totals"]["capacity_bytes"] == 1 << 20
    staging = summary["staging"]
    assert [(s["node"], s["active"], s["queued"]) for s in staging] == [("w1", [], 0)]
    assert staging[0]["failed"] == len(staging[0]["failing"])
    assert summary["top_files"]["coordinator"] == "svc"
    assert summary["top_files"]["files"][0]["lfn"] == "/store/x.root"
    assert summary["hits"] == {"looked_up": 2, "held": 0, "ratio": 0.0}
    assert {m["health"] for m in summary["members"]} == {"ok"}
    check_answer(summary, dashboard.Summary)  # the contract describes every part of it

    # /store/x.root is in no storage: once the worker tried, the summary names it and says why
    def failing():
        service.client.post(f"{service.url}{API}/coordinator/cycle", {})
        service.client.post(f"{worker.url}{API}/cache/cycle", {})
        return Client().get(f"{service.url}{API}/dashboard/summary")["staging"][0]["failing"]

    found = wait_until(failing, what="the failing copy in the summary")
    check_answer({"lfn": None, "attempts": None, "error": None, "permanent": None, **found[0]}, dashboard.Failing)
    assert found[0]["lfn"] == "/store/x.root" and found[0]["permanent"] is True and found[0]["attempts"] == 1
    assert "/store/x.root" in found[0]["error"] and "Errno" not in found[0]["error"]

    worker.stop()  # still a member until the expiry, but no longer answering
    summary = wait_until(lambda: (s := Client().get(f"{service.url}{API}/dashboard/summary"))["staging"][0].get("error")
                         and s, what="the stopped worker's staging to fail")
    assert "cannot reach peer" in summary["staging"][0]["error"]
    check_answer(summary, dashboard.Summary)


def test_summary_without_coordinator(inprocess_node):
    node = inprocess_node("bare", ["dashboard"])
    summary = Client().get(f"{node.url}{API}/dashboard/summary")
    assert summary["top_files"] == {"error": "no coordinator in the pool"}
    assert summary["hits"] is None and summary["staging"] == []
    check_answer(summary, dashboard.Summary)


def test_totals_and_hits_sum_the_facts_that_fit_their_types():
    from htda.dashboard.summary import _hit_ratio, _totals

    def member(**info):
        return {"name": "m", "info": info}

    cache = {"used_bytes": 1, "free_bytes": 2, "capacity_bytes": 3, "files": 4, "staging": 5}
    caches = [member(cache=cache), member(cache=cache), member(cache={"files": 9}), member()]
    assert to_wire(_totals(caches)) == {"used_bytes": 2, "free_bytes": 4, "capacity_bytes": 6, "files": 8,
                                        "staging": 10, "cache_nodes": 4}  # facts that do not fit count as none
    locators = [member(locator={"files": 1, "nodes": 1, "looked_up": 3, "held": 1}),
                member(locator={"files": 1, "nodes": 1, "looked_up": 1, "held": 1}), member(locator={"files": 2})]
    assert to_wire(_hit_ratio(locators)) == {"looked_up": 4, "held": 2, "ratio": 0.5}
    assert _hit_ratio([member(locator={"files": 2})]) is None

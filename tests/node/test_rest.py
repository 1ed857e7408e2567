"""The REST layer: routing, JSON errors with fitting statuses, OpenAPI agreeing with the routes."""

import json
import re
from pathlib import Path

import pytest

from htda.node.client import Client
from htda.node.rest import Response, RestApp, RestServer, Route
from htda.node.runtime import load_config
from testkit.http import raw as raw_request
from testkit.nodes import SECRET

ALL_IN_ONE = Path(__file__).resolve().parents[2] / "config" / "all-in-one.toml"


@pytest.fixture
def node(inprocess_node, tmp_path):
    # the example's components; the submit agent's socket in this test's own directory (root's, 0700)
    return inprocess_node("rest-node", load_config(ALL_IN_ONE)["node"]["components"],
                          sections={"submit": {"socket": str(tmp_path / "submit.sock")}})


def test_core_endpoints_answer(node):
    client = Client(SECRET.encode())
    info = client.get(f"{node.url}/api/v1/node")
    assert info["name"] == "rest-node" and info["version"] and info["uptime"] >= 0
    assert info["roles"] == load_config(ALL_IN_ONE)["node"]["components"]
    assert client.get(f"{node.url}/healthz")["status"] == "ok"
    assert [m["name"] for m in client.get(f"{node.url}/api/v1/pool")["members"]] == ["rest-node"]


def test_openapi_document_lists_exactly_the_served_routes(node):
    doc = Client().get(f"{node.url}/api/v1/openapi.json")
    assert doc["openapi"].startswith("3.")
    documented = {(method.upper(), path) for path, ops in doc["paths"].items() for method in ops}
    served = {(r.method, re.sub(r"\{([^}:]+)(:[^}]*)?\}", r"{\1}", r.path)) for r in node.app.routes}
    assert documented == served
    for path, ops in doc["paths"].items():
        for op in ops.values():
            assert op["summary"] and op["responses"]
            names = {p["name"] for p in op.get("parameters", []) if p["in"] == "path"}
            assert names == set(re.findall(r"\{([^}]+)\}", path))


def test_every_documented_get_without_parameters_is_served(node):
    client = Client(SECRET.encode(), retries=0)
    doc = client.get(f"{node.url}/api/v1/openapi.json")
    for path, ops in doc["paths"].items():
        if "get" in ops and "{" not in path:
            status, _ = raw_request("GET", node.url + path)
            assert status != 404, path


def test_metrics_are_prometheus_text(node):
    Client().get(f"{node.url}/healthz")
    status, body = raw_request("GET", f"{node.url}/metrics")
    text = body.decode()
    assert status == 200
    assert "# TYPE htda_http_requests_total counter" in text
    assert re.search(r'^htda_http_requests_total\{method="GET",route="/healthz",status="200"\} \d+$', text, re.M)
    assert re.search(r"^htda_process_resident_bytes \d+$", text, re.M)
    assert re.search(r"^htda_http_connections_dropped \d+$", text, re.M)
    for line in text.splitlines():
        assert line.startswith("#") or re.match(r"^[a-zA-Z_:][a-zA-Z0-9_:]*(\{.*\})? [-+0-9.eInf]+$", line), line


@pytest.mark.parametrize("method,path,body,status", [
    ("GET", "/no/such/thing", b"", 404),
    ("DELETE", "/api/v1/node", b"", 405),
    ("POST", "/api/v1/pool/heartbeat", b"{not json", 400),
    ("POST", "/api/v1/pool/heartbeat", b"[]", 400),
    ("POST", "/api/v1/pool/heartbeat", b'{"name": 1, "url": "http://x", "roles": [], "version": "", "started": 0}',
     400),
    ("POST", "/api/v1/pool/heartbeat", b'{"name": "a", "url": "http://x", "roles": [], "version": "", "started": 0,'
                                       b' "surprise": 1}', 400),
    ("POST", "/api/v1/pool/heartbeat", b'{"name": "a", "url": "ftp://x", "roles": [], "version": "", "started": 0}',
     400),
    ("POST", "/api/v1/pool/heartbeat", b"", 400),
    ("POST", "/api/v1/pool/heartbeat", b"\xff\xfe", 400),
    ("POST", "/api/v1/pool/heartbeat", b"[" * 100000 + b"]" * 100000, 400),
], ids=["404", "405", "bad-json", "not-object", "wrong-type", "unknown-field", "bad-url", "empty", "not-utf8",
        "deep-json"])
def test_bad_requests_get_json_errors_with_fitting_status(node, method, path, body, status):
    from htda.node.auth import Signer

    header = Signer(SECRET.encode()).for_url(method, node.url + path, body)
    code, answer = raw_request(method, node.url + path, body, [f"Authorization: {header}"])
    assert code == status, answer
    error = json.loads(answer)["error"]
    assert error["status"] == status and error["message"]


def test_oversized_body_is_413_before_auth(node):
    body = b"x" * (2 * 1024 * 1024)
    code, answer = raw_request("POST", f"{node.url}/api/v1/pool/heartbeat", body)
    assert code == 413 and b"exceeds" in answer


def test_a_handler_bug_is_a_logged_500_and_the_server_keeps_serving(caplog):
    def broken(request):
        raise RuntimeError("boom")

    app = RestApp(None)
    app.add([Route("GET", "/broken", broken, "always fails", access="public"),
             Route("GET", "/fine", lambda r: {"ok": True}, "works", access="public")])
    server = RestServer(app, "127.0.0.1", 0)
    server.start()
    try:
        url = f"http://127.0.0.1:{server.port}"
        code, answer = raw_request("GET", url + "/broken")
        assert code == 500 and b"boom" not in answer
        assert "boom" in caplog.text
        assert Client().get(url + "/fine") == {"ok": True}
    finally:
        server.stop()


@pytest.mark.parametrize("size", [0, 1, 256 << 10, (256 << 10) + 1, (3 << 20) + 12345])
def test_large_answers_arrive_whole_and_in_order(size):
    """A bulk answer (a range of a copy) is handed to the server in pieces: it must arrive as it was made."""
    body = bytes(range(256)) * (size // 256) + bytes(size % 256)
    app = RestApp(None)
    app.add([Route("GET", "/blob", lambda r: Response(body, content_type="application/octet-stream"), "bytes",
                   access="public")])
    server = RestServer(app, "127.0.0.1", 0)
    server.start()
    try:
        status, headers, got = Client().fetch(f"http://127.0.0.1:{server.port}/blob")
        assert status == 200 and int(headers["content-length"]) == size and got == body
    finally:
        server.stop()


def test_duplicate_routes_are_refused():
    app = RestApp(None)
    app.add([Route("GET", "/a", lambda r: {}, "a")])
    with pytest.raises(ValueError):
        app.add([Route("GET", "/a", lambda r: {}, "a again")])


def test_state_changing_routes_default_to_authenticated():
    assert Route("POST", "/x", lambda r: {}, "x").access == "auth"
    assert Route("DELETE", "/x", lambda r: {}, "x").access == "auth"
    assert Route("GET", "/x", lambda r: {}, "x").access == "read"


def test_repository_copy_of_the_openapi_document_matches_the_served_one(node):
    """docs/openapi.json (the REST reference) is what an all-in-one node serves; regenerate with
    scripts/update-openapi after changing an endpoint."""
    served = Client().get(f"{node.url}/api/v1/openapi.json")
    kept = json.loads((Path(__file__).resolve().parents[2] / "docs" / "openapi.json").read_text())
    served["info"]["version"] = kept["info"]["version"] = ""
    assert served == kept, "docs/openapi.json is stale: run scripts/update-openapi"

"""Request bodies: a refused request is answered on its headers, its body never read; unsigned bodies are small."""

import json
import select
import socket
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from htda.node.auth import Signer
from htda.node.client import Client, HTTPStatusError
from htda.node.rest import UNSIGNED_BODY, RestApp, RestServer, Route
from htda.protocol.paths import HOLDINGS, LOOKUP
from testkit.http import raw as raw_request
from testkit.nodes import SECRET

KEY = SECRET.encode()
# HOLDINGS: auth, takes bodies up to 256 MB once signed; LOOKUP: read, open to loopback without a signature
BIG = 64 * 1024 * 1024


def peak_rss(pid: int) -> int:
    """The process's peak resident memory (VmHWM), which a body read and freed again still shows."""
    status = Path(f"/proc/{pid}/status").read_text()
    return next(int(line.split()[1]) * 1024 for line in status.splitlines() if line.startswith("VmHWM:"))


def stream_post(url: str, path: str, size: int, headers: tuple[str, ...] = (), timeout: float = 30.0):
    """POST ``size`` bytes from a real socket, sending only while the server has not answered.

    Returns (status, body bytes sent, answer, closed): ``closed`` says the
    server ended the connection after its answer.
    """
    parts = urlsplit(url)
    sock = socket.create_connection((parts.hostname, parts.port), timeout=5)
    head = [f"POST {path} HTTP/1.1", f"Host: {parts.netloc}", "Content-Type: application/json",
            f"Content-Length: {size}", *headers, "", ""]
    sock.sendall("\r\n".join(head).encode())
    sock.setblocking(False)
    chunk, sent, answer, closed = b"0" * 65536, 0, b"", False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not closed:
        readable, writable, _ = select.select([sock], [sock] if sent < size else [], [], 0.5)
        if readable:
            try:
                data = sock.recv(65536)
            except ConnectionResetError:
                data = b""
            answer += data
            closed = not data
        elif writable and not answer:
            try:
                sent += sock.send(chunk[:size - sent])
            except BlockingIOError:
                pass
            except (BrokenPipeError, ConnectionResetError):
                sent = size  # the server stopped listening: keep reading its answer
    sock.close()
    status = int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.1 ") else 0
    return status, sent, answer.partition(b"\r\n\r\n")[2], closed


@pytest.fixture(scope="module")
def locator(tmp_path_factory):
    from testkit.nodes import NodeProcess, free_port, write_config

    directory = tmp_path_factory.mktemp("bodies")
    port = free_port()
    node = NodeProcess(write_config(directory, "bodies", ["locator"], port, [f"http://127.0.0.1:{port}"])).start()
    yield node
    node.stop()


@pytest.mark.parametrize("auth", [
    None,
    "Authorization: HTDA-HMAC nonsense",
    "wrong-secret",
    "stale",
    "other-node",
])
def test_a_refused_body_is_never_read(locator, auth):
    def header(body_size: int) -> tuple[str, ...]:
        url = locator.url + HOLDINGS
        if auth is None:
            return ()
        if auth == "wrong-secret":
            return ("Authorization: " + Signer(b"not-the-pool-secret-at-all").for_url("POST", url, b"x"),)
        if auth == "stale":
            return ("Authorization: " + Signer(KEY).for_url("POST", url, b"x", now=time.time() - 3600),)
        if auth == "other-node":
            return ("Authorization: " + Signer(KEY).for_url("POST", "http://127.0.0.1:1" + HOLDINGS, b"x"),)
        return (auth,)

    before = peak_rss(locator.proc.pid)
    status, sent, answer, closed = stream_post(locator.url, HOLDINGS, BIG, header(BIG))
    assert status == 401, answer
    assert json.loads(answer)["error"]["message"].startswith("authentication failed")
    assert sent < BIG // 4, f"the server read {sent} bytes of a body it refused"
    assert closed, "the connection of an unread body must be closed, not drained"
    assert peak_rss(locator.proc.pid) - before < 16 * 1024 * 1024
    assert locator.get("/healthz")["status"] == "ok"


def test_four_unsigned_large_posts_at_once_leave_memory_flat(locator):
    from concurrent.futures import ThreadPoolExecutor

    before = peak_rss(locator.proc.pid)
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: stream_post(locator.url, HOLDINGS, 4 * BIG), range(4)))
    assert [r[0] for r in results] == [401] * 4
    assert sum(r[1] for r in results) < BIG  # of 1 GiB offered
    assert peak_rss(locator.proc.pid) - before < 16 * 1024 * 1024


def test_the_pycurl_client_sees_the_answer_to_a_refused_body(locator):
    before = peak_rss(locator.proc.pid)
    for _ in range(3):  # the server closes before the body is sent: the client must still read the answer
        with pytest.raises(HTTPStatusError) as refused:
            Client(None, retries=0, timeout=20).post(locator.url + HOLDINGS, "0" * BIG)
        assert refused.value.status == 401 and "missing Authorization" in str(refused.value)
    assert peak_rss(locator.proc.pid) - before < 16 * 1024 * 1024


def test_a_body_other_than_the_signed_one_is_refused_after_reading(locator):
    signed = b'{"node":"n1","files":[{"lfn":"/a","size":1}],"replace":true}'
    swapped = b'{"node":"n1","files":[{"lfn":"/b","size":1}],"replace":true}'
    header = Signer(KEY).for_url("POST", locator.url + HOLDINGS, signed)
    status, answer = raw_request("POST", locator.url + HOLDINGS, swapped,
                                                 [f"Authorization: {header}", "Content-Type: application/json"])
    assert status == 401 and b"body does not match its signed hash" in answer
    lookup = Client(None).post(locator.url + LOOKUP, {"lfns": ["/a", "/b"]})["files"]
    assert lookup == {"/a": [], "/b": []}


def test_unknown_paths_and_transfer_codings_do_not_read_the_body_either(locator):
    status, sent, _, closed = stream_post(locator.url, "/api/v1/no/such/thing", BIG)
    assert status == 404 and sent < BIG // 4 and closed
    status, sent, answer, closed = stream_post(locator.url, HOLDINGS, 100, ("Transfer-Encoding: chunked",))
    assert status in (400, 411) and closed, answer


def test_unsigned_bodies_on_read_routes_are_capped_and_a_signature_lifts_the_cap(locator):
    lfns = [f"/data/file-{i:05d}.root" for i in range(UNSIGNED_BODY // 2)]  # past the lookup's 64 KB
    body = json.dumps({"lfns": lfns}).encode()
    assert len(body) > 64 * 1024
    status, answer = raw_request("POST", locator.url + LOOKUP, body, ["Content-Type: application/json"])
    assert status == 413 and b"unsigned" in answer
    assert len(Client(KEY).post(locator.url + LOOKUP, {"lfns": lfns})["files"]) == len(lfns)
    assert Client(None).post(locator.url + LOOKUP, {"lfns": lfns[:10]})["files"]  # small and unsigned: fine


@pytest.fixture
def public_server():
    echo = lambda r: {"size": len(r.body)}  # noqa: E731
    app = RestApp(None, read_networks=["127.0.0.0/8"])
    app.add([Route("POST", "/small", echo, "public, no declared limit", access="public"),
             Route("POST", "/declared", echo, "public, declares its bodies", access="public", max_body=100_000),
             Route("POST", "/read-open", echo, "read, declares unsigned bodies", access="read",
                   unsigned_body=50_000)])
    server = RestServer(app, "127.0.0.1", 0)
    server.start()
    yield f"http://127.0.0.1:{server.port}"
    server.stop()


def test_routes_that_take_larger_unsigned_bodies_declare_it(public_server):
    assert raw_request("POST", public_server + "/small", b"x" * UNSIGNED_BODY)[0] == 200
    assert raw_request("POST", public_server + "/small", b"x" * (UNSIGNED_BODY + 1))[0] == 413
    assert json.loads(raw_request("POST", public_server + "/declared", b"x" * 90_000)[1]) == {"size": 90_000}
    assert raw_request("POST", public_server + "/declared", b"x" * 100_001)[0] == 413
    assert raw_request("POST", public_server + "/read-open", b"x" * 50_000)[0] == 200
    assert raw_request("POST", public_server + "/read-open", b"x" * 50_001)[0] == 413

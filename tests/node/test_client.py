"""The PycURL client against real loopback servers: reuse, timeouts, retries, clear errors."""

import threading
import time

import pytest

from htda.node.client import BadResponse, Client, ConnectError, HTTPStatusError, Timeout
from htda.node.rest import HTTPError, Response, RestApp, RestServer, Route
from testkit.nodes import free_port


@pytest.fixture
def server():
    calls = {"flaky": 0, "slow": 0}
    peers = set()

    def flaky(request):
        calls["flaky"] += 1
        if calls["flaky"] < 3:
            raise HTTPError(503, "warming up")
        return {"attempt": calls["flaky"]}

    def slow(request):
        calls["slow"] += 1
        time.sleep(3.0)
        return {}

    def peer(request):
        peers.add(request.remote)
        return {}

    app = RestApp(None)
    app.add([
        Route("GET", "/flaky", flaky, "503 twice, then fine", access="public"),
        Route("POST", "/flaky", flaky, "503 twice, then fine", access="public"),
        Route("GET", "/slow", slow, "sleeps three seconds", access="public"),
        Route("GET", "/garbage", lambda r: Response(b"<html>", content_type="text/html"), "not JSON",
              access="public"),
        Route("GET", "/teapot", lambda r: (_ for _ in ()).throw(HTTPError(409, "conflict here")), "409",
              access="public"),
        Route("GET", "/peer", peer, "records the client port", access="public"),
    ])
    srv = RestServer(app, "127.0.0.1", 0)
    srv.start()
    yield f"http://127.0.0.1:{srv.port}", calls, peers
    srv.stop()


def test_idempotent_calls_are_retried_with_backoff(server):
    url, calls, _ = server
    assert Client(retries=3, backoff=0.01).get(url + "/flaky") == {"attempt": 3}


def test_non_idempotent_calls_are_not_retried(server):
    url, calls, _ = server
    with pytest.raises(HTTPStatusError) as err:
        Client(retries=3, backoff=0.01).post(url + "/flaky", {})
    assert err.value.status == 503 and calls["flaky"] == 1


def test_retries_are_bounded(server):
    url, calls, _ = server
    with pytest.raises(HTTPStatusError):
        Client(retries=1, backoff=0.01).get(url + "/flaky")
    assert calls["flaky"] == 2


def test_total_timeout_is_enforced(server):
    url, calls, _ = server
    started = time.monotonic()
    with pytest.raises(Timeout):
        Client(retries=0).get(url + "/slow", timeout=0.2)
    assert time.monotonic() - started < 2.0  # well before the answer (3 s), even on a loaded machine


def test_connection_refused_is_a_connect_error():
    with pytest.raises(ConnectError):
        Client(retries=0).get(f"http://127.0.0.1:{free_port()}/x")


def test_error_answers_carry_status_and_message(server):
    url, _, _ = server
    with pytest.raises(HTTPStatusError) as err:
        Client(retries=0).get(url + "/teapot")
    assert err.value.status == 409 and "conflict here" in str(err.value)
    with pytest.raises(BadResponse):
        Client(retries=0).get(url + "/garbage")


def test_connections_are_reused(server):
    url, _, peers = server
    client = Client()
    for _ in range(20):
        client.get(url + "/peer")
    assert len(peers) == 1  # same client address: one keep-alive connection


def test_each_thread_gets_its_own_handle(server):
    url, _, _ = server
    client = Client()
    errors = []

    def work():
        try:
            for _ in range(50):
                client.get(url + "/peer")
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors

"""The gate in front of cheroot's workers: deadlines, bounds, keep-alive and pipelining still work."""

import socket
import time

import pytest

from htda.node.client import Client
from htda.node.gate import GateOptions, request_ready
from htda.node.rest import RestApp, RestServer, Route


@pytest.fixture
def server():
    app = RestApp(None)
    app.add([Route("GET", "/ping", lambda r: {"pong": True}, "ping", access="public")])
    srv = RestServer(app, "127.0.0.1", 0, threads=2,
                     gate=GateOptions(header_timeout=0.5, idle_timeout=1.0, max_pending=10, max_header=4096))
    srv.start()
    yield srv
    srv.stop()


def connect(srv: RestServer) -> socket.socket:
    return socket.create_connection(("127.0.0.1", srv.port), timeout=3)


def read_all(sock: socket.socket) -> bytes:
    chunks = []
    while True:
        try:
            chunk = sock.recv(65536)
        except (TimeoutError, ConnectionResetError):
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def test_pipelined_and_kept_alive_requests_are_answered_in_order(server):
    sock = connect(server)
    request = b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n"
    sock.sendall(request * 2 + b"GET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert read_all(sock).count(b'{"pong":true}') == 3
    client = Client(None, retries=0)  # keep-alive: one connection for many requests
    for _ in range(5):
        assert client.get(f"http://127.0.0.1:{server.port}/ping") == {"pong": True}
    client.close()


def test_silent_and_slow_connections_are_closed_at_the_header_deadline(server):
    silent, slow = connect(server), connect(server)
    slow.sendall(b"GET /ping HTTP/1.1\r\n")
    started = time.monotonic()
    assert read_all(silent) == b"" and read_all(slow) == b""  # closed, without an answer
    assert 0.4 < time.monotonic() - started < 2.0
    assert server.dropped == 2


def pong(sock: socket.socket) -> bool:
    answer = b""
    while not answer.endswith(b'{"pong":true}'):
        chunk = sock.recv(65536)
        if not chunk:
            return False
        answer += chunk
    return True


def test_an_idle_kept_alive_connection_waits_longer_than_a_new_one(server):
    sock = connect(server)
    sock.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
    assert pong(sock)
    time.sleep(0.7)  # past the header deadline, within the idle timeout
    sock.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
    assert pong(sock)
    started = time.monotonic()
    assert read_all(sock) == b""  # closed once idle for idle_timeout
    assert 0.8 < time.monotonic() - started < 2.0
    assert server.dropped == 0  # an idle keep-alive connection is no offender


def test_the_oldest_waiting_connection_makes_room(server):
    waiting = [connect(server) for _ in range(10)]
    time.sleep(0.1)
    newest = connect(server)
    newest.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert b"pong" in read_all(newest)
    waiting[0].settimeout(0.3)
    assert read_all(waiting[0]) == b""  # dropped first
    for sock in waiting:
        sock.close()


def test_an_oversized_header_block_is_refused(server):
    sock = connect(server)
    sock.sendall(b"GET /ping HTTP/1.1\r\nX-Big: " + b"a" * 5000)
    assert read_all(sock).startswith(b"HTTP/1.1 431 ")


@pytest.mark.parametrize("head,state", [
    (b"GET / HTTP/1.1\r\nHost: x\r\n", "wait"),
    (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "ready"),
    (b"GET / HTTP/1.1\nHost: x\n\n", "ready"),  # bare LFs: cheroot answers 400
    (b"POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\nabc", "wait"),  # a small body is waited for too
    (b"POST / HTTP/1.1\r\ncontent-length:5\r\n\r\nabcde", "ready"),
    (b"POST / HTTP/1.1\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n", "ready"),
    (b"POST / HTTP/1.1\r\nContent-Length: 999999\r\n\r\n", "ready"),  # large: the application decides
    # whatever cheroot makes of the length, the gate waits for the same: the last line wins, "+5" is 5
    (b"POST / HTTP/1.1\r\nContent-Length: 0\r\nContent-Length: 5\r\n\r\nab", "wait"),
    (b"POST / HTTP/1.1\r\nContent-Length: +5\r\n\r\nab", "wait"),
    (b"\r\nPOST / HTTP/1.1\r\nContent-Length: 2\r\n\r\nab", "ready"),
    (b"POST / HTTP/1.1\r\nContent-Length: two\r\n\r\n", "ready"),  # cheroot answers 400
    (b"POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", "ready"),
    (b"GET / HTTP/1.1\r\nX: " + b"a" * 70000, "large"),
])
def test_when_a_request_is_complete_enough_for_a_worker(head, state):
    assert request_ready(head, GateOptions()) == state

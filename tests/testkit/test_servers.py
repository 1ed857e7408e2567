"""The test kit's servers start reliably on a busy machine: ports outside the range outgoing connections
use, a taken port tried again, a dead server reported at once."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

import testkit.storage
from testkit.nodes import _ephemeral_low, free_port, wait_until
from testkit.processes import ProcessExited
from testkit.storage import XRootDServer


def test_free_ports_are_below_the_ephemeral_range_and_free():
    low = _ephemeral_low()
    for _ in range(20):
        port = free_port()
        assert 10000 <= port < low
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_waiting_for_a_dead_process_stops_at_once():
    proc = subprocess.Popen(["false"])
    proc.wait()

    def alive():
        raise ProcessExited(f"exited with {proc.returncode}")

    started = time.monotonic()
    with pytest.raises(ProcessExited, match="exited with 1"):
        wait_until(alive, timeout=30)
    assert time.monotonic() - started < 5


@pytest.mark.skipif(shutil.which("xrootd") is None or os.geteuid() != 0, reason="needs xrootd-server and root")
@contextmanager
def first_port_taken(monkeypatch, module, address: str = "127.0.0.1") -> Iterator[int]:
    """``module``'s free_port() hands out a port something listens on first, then a free one: the taken port."""
    with socket.socket() as taken:
        taken.bind((address, free_port()))
        taken.listen()
        ports = iter([taken.getsockname()[1], free_port()])
        monkeypatch.setattr(module, "free_port", lambda: next(ports))
        yield taken.getsockname()[1]


def test_xrootd_moves_to_another_port_when_its_first_is_taken(monkeypatch):
    with first_port_taken(monkeypatch, testkit.storage, "0.0.0.0") as taken:  # xrootd listens on every address
        workdir = Path(tempfile.mkdtemp(prefix="htda-testkit-"))
        os.chmod(workdir, 0o755)
        try:
            server = XRootDServer(workdir / "export", workdir / "xrd").start()
            try:
                assert server.port != taken
                assert server.url == f"root://127.0.0.1:{server.port}/"
                assert server.proc is not None and server.proc.poll() is None
            finally:
                server.stop()
        finally:
            shutil.rmtree(workdir, ignore_errors=True)


def test_a_client_hanging_up_mid_transfer_prints_no_traceback_but_other_errors_do(tmp_path, capfd):
    """Storage sees clients hang up every day (a copy cancelled): the test HTTP server stays quiet about it."""
    from testkit.storage import RangeHTTPServer

    (tmp_path / "big.dat").write_bytes(b"x" * (8 << 20))
    server = RangeHTTPServer(tmp_path).start()
    server.delay = 0.01  # slow enough that the hang-up comes mid-transfer
    try:
        for reset in (False, True):
            with socket.create_connection(server.server_address) as client:
                client.sendall(b"GET /big.dat HTTP/1.1\r\nHost: x\r\n\r\n")
                client.recv(65536)
                if reset:  # an abortive close: the server's next write meets a reset
                    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            time.sleep(0.3)
        assert "Traceback" not in capfd.readouterr().err
        try:
            raise ValueError("a handler bug")
        except ValueError:
            server.handle_error(None, ("127.0.0.1", 1))
        assert "ValueError: a handler bug" in capfd.readouterr().err
    finally:
        server.stop()


def test_an_inprocess_node_moves_to_another_port_when_its_first_is_taken(monkeypatch, inprocess_node):
    import tests.conftest

    with first_port_taken(monkeypatch, tests.conftest) as taken:
        node = inprocess_node("moved", ["locator"])
        assert node.server.port != taken
        assert node.url.endswith(f":{node.server.port}")


def test_a_node_process_moves_to_another_port_when_its_first_is_taken(monkeypatch, node_factory):
    import tests.conftest

    with first_port_taken(monkeypatch, tests.conftest) as taken:
        node = node_factory("moved", ["locator"])
        assert not node.url.endswith(f":{taken}")
        assert node.get("/healthz")["status"] == "ok"

"""The test kit's servers start reliably on a busy machine: ports outside the range outgoing connections
use, a taken port tried again, a dead server reported at once."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
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
def test_xrootd_moves_to_another_port_when_its_first_is_taken(monkeypatch):
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", free_port()))  # xrootd listens on every address
        taken.listen()
        ports = iter([taken.getsockname()[1], free_port()])
        monkeypatch.setattr(testkit.storage, "free_port", lambda: next(ports))
        workdir = Path(tempfile.mkdtemp(prefix="htda-testkit-"))
        os.chmod(workdir, 0o755)
        try:
            server = XRootDServer(workdir / "export", workdir / "xrd").start()
            try:
                assert server.port != taken.getsockname()[1]
                assert server.url == f"root://127.0.0.1:{server.port}/"
                assert server.proc is not None and server.proc.poll() is None
            finally:
                server.stop()
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

"""Daemon behaviour: systemd readiness notification and readable logs."""

import socket
import subprocess
import sys

from htda.node.daemon import sd_notify
from htda.testing.nodes import free_port, write_config


def test_sd_notify_without_systemd_is_a_no_op(monkeypatch):
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    assert sd_notify("READY=1") is False


def test_daemon_reports_ready_to_systemd_and_logs_with_its_name(tmp_path):
    sock_path = tmp_path / "notify.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(str(sock_path))
    listener.settimeout(20)
    port = free_port()
    config = write_config(tmp_path, "notified", ["locator"], port, [f"http://127.0.0.1:{port}"])
    proc = subprocess.Popen([sys.executable, "-m", "htda.node.daemon", "--config", str(config)],
                            stderr=subprocess.PIPE, text=True, env={"NOTIFY_SOCKET": str(sock_path), "PATH": ""})
    try:
        message = listener.recv(4096).decode()
        assert message.startswith("READY=1") and f"127.0.0.1:{port}" in message
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=20)
        listener.close()
    assert proc.returncode == 0
    assert listener.fileno() == -1
    first = err.splitlines()[0]
    assert " notified htda.node INFO: " in first
    assert "STOPPING" not in err

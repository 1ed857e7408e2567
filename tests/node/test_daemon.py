"""Daemon behaviour: systemd readiness notification and readable logs."""

import platform
import socket
import subprocess
import sys

from htda.node.daemon import sd_notify
from testkit.nodes import NodeProcess, free_port, write_config


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


def test_a_component_that_fails_to_start_ends_the_process(tmp_path):
    # Regression: the submit agent refused its socket directory, the daemon printed the error, and the process
    # went on answering /healthz (the REST server was up) with a component missing.
    unsafe = tmp_path / "world-writable"
    unsafe.mkdir(mode=0o777)
    unsafe.chmod(0o777)
    port = free_port()
    config = write_config(tmp_path, "half", ["submit"], port, [f"http://127.0.0.1:{port}"],
                          sections={"submit": {"socket": str(unsafe / "submit.sock")}})
    node = NodeProcess(config).start(wait=False)
    assert node.proc.wait(timeout=20) != 0
    assert "submit" in node.log.read_text()


def test_large_blocks_are_given_back_to_the_system_where_glibc_allows_it():
    from htda.node.daemon import return_large_blocks

    assert return_large_blocks() is (platform.libc_ver()[0] == "glibc")

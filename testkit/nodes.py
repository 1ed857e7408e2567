"""Start real nodes: in this process (fast) or as ``htda-node`` subprocesses (killable)."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from htda.node.client import Client, ClientError
from htda.node.clock import SYSTEM_CLOCK, Clock
from htda.node.runtime import Node, load_config
from htda.protocol import paths

from .processes import ProcessExited, stop_process

__all__ = ["free_port", "heartbeat", "write_config", "NodeProcess", "start_inprocess", "wait_until", "SECRET"]

SECRET = "0123456789abcdef0123456789abcdef-test-secret"


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A loopback port free now, for a server started next.

    Chosen below the kernel's ephemeral range: a port that ``bind(0)`` hands out comes from the range
    outgoing connections use too, so any connection made between this check and the server's own bind
    (another test worker's, a daemon's) can take it, and the server then fails with "address in use".
    """
    low = _ephemeral_low()
    for _ in range(200):
        port = random.randrange(10000, low) if low > 11000 else 0
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return s.getsockname()[1]
    raise RuntimeError("no free loopback port below the ephemeral range")


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list):
        if value and all(isinstance(v, dict) for v in value):
            return "[" + ", ".join(_inline(v) for v in value) + "]"
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return _inline(value)
    raise TypeError(f"cannot write {value!r} as TOML")


def _inline(table: dict) -> str:
    return "{" + ", ".join(f"{k} = {_toml(v)}" for k, v in table.items()) + "}"


def write_config(directory: Path, name: str, components: list[str], port: int, seeds: list[str],
                 sections: dict[str, dict] | None = None, interval: float = 0.5, expiry: float = 3.0,
                 scheme: str = "http", secret: str = SECRET, **pool: Any) -> Path:
    """Write a node config (and the shared secret file) under ``directory``; return its path."""
    directory.mkdir(parents=True, exist_ok=True)
    secret_file = directory / "pool.secret"
    if not secret_file.exists():
        secret_file.write_text(secret + "\n")
        secret_file.chmod(0o600)
    tables: dict[str, dict] = {
        "node": {"name": name, "listen": f"127.0.0.1:{port}", "components": components,
                 "data_dir": f"data/{name}", "log_level": "info",
                 "advertise_url": f"{scheme}://127.0.0.1:{port}"},
        "pool": {"seeds": seeds, "secret_file": "pool.secret", "heartbeat_interval": interval,
                 "expiry": expiry, **pool},
    }
    for key, table in (sections or {}).items():
        tables.setdefault(key, {}).update(table)
    lines = []
    for key, table in tables.items():
        lines.append(f"[{key}]")
        lines += [f"{k} = {_toml(v)}" for k, v in table.items()]
        lines.append("")
    path = directory / f"{name}.toml"
    path.write_text("\n".join(lines))
    return path


def heartbeat(client: Client, url: str, name: str, roles: list[str], info: dict[str, Any] | None = None,
              started: float = 1.0) -> Any:
    """Heartbeat as member ``name`` to the node at ``url`` (as the pool protocol carries it); the answer."""
    return client.post(url + paths.HEARTBEAT, {
        "name": name, "url": f"http://127.0.0.1:9/{name}", "roles": roles, "version": "test", "started": started,
        "info": info or {}})


def wait_until(predicate, timeout: float = 10.0, interval: float = 0.05, what: str = "condition") -> Any:
    """Poll ``predicate`` until it returns a truthy value; fail with ``what`` after ``timeout``, or at once
    when it raises :class:`~testkit.processes.ProcessExited`."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except ProcessExited:
            raise
        except Exception as exc:  # noqa: BLE001 - keep polling, report the last error
            last_error = exc
        time.sleep(interval)
    detail = f" (last error: {last_error})" if last_error else ""
    raise TimeoutError(f"timed out after {timeout}s waiting for {what}{detail}")


class NodeProcess:
    """An ``htda-node`` subprocess with a signed client; ``kill()`` is a real SIGKILL."""

    def __init__(self, config: Path, secret: str = SECRET, launcher: tuple[str, ...] = ()):
        self.config = config
        self.launcher = launcher  # a command the node runs under, e.g. setpriv with a unit's capabilities
        cfg = load_config(config)
        self.name = cfg["node"]["name"]
        self.url = cfg["node"]["advertise_url"]
        tls = {k: (str(config.parent / v) if isinstance(v, str) and v else v) for k, v in cfg["tls"].items()}
        self.client = Client(secret.encode(), timeout=5.0, retries=0, ca_file=tls["ca_file"] or None,
                             client_cert=tls["certificate"] or None, client_key=tls["private_key"] or None)
        self.log = config.with_suffix(".log")
        self.proc: subprocess.Popen | None = None

    def start(self, wait: bool = True, timeout: float = 20) -> "NodeProcess":
        logfile = open(self.log, "ab")
        self.proc = subprocess.Popen([*self.launcher, sys.executable, "-m", "htda.node.daemon", "--config",
                                      str(self.config)],
                                     stdout=logfile, stderr=subprocess.STDOUT, cwd=self.config.parent,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1"})
        logfile.close()
        if wait:
            wait_until(self._healthy, timeout=timeout, what=f"node {self.name} to answer /healthz (log: {self.log})")
        return self

    def _healthy(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise ProcessExited(f"node {self.name} exited with {self.proc.returncode}: {self.log.read_text()[-2000:]}")
        try:
            return self.client.get(f"{self.url}/healthz", timeout=1.0)["status"] == "ok"
        except ClientError:
            return False

    def get(self, path: str) -> Any:
        return self.client.get(self.url + path)

    def post(self, path: str, payload: Any) -> Any:
        return self.client.post(self.url + path, payload)

    def members(self) -> set[str]:
        return {m["name"] for m in self.get("/api/v1/pool")["members"]}

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> int | None:
        stop_process(self.proc, timeout=15)
        self.client.close()
        return self.proc.returncode if self.proc else None


def start_inprocess(config: Path, clock: Clock = SYSTEM_CLOCK) -> Node:
    """A :class:`Node` in this process on ``clock`` (a ``FakeClock`` moves only when told), started; call
    ``node.stop()`` when done."""
    node = Node(load_config(config), clock)
    node.start()
    return node

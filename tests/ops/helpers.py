"""Helpers of the reliability and security suite: subprocess nodes and hand-signed raw requests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from htda.node.auth import Signer
from testkit.http import RawClient
from testkit.nodes import SECRET, NodeProcess, free_port, write_config
from tests.bench_scripts import load_bench_script
from tests.condor.kit import shared_dir

__all__ = ["ALL_ROLES", "start_node", "Raw", "unhandled_errors", "load_bench"]

#: every component an all-in-one node can run, so every endpoint is served
ALL_ROLES = ["coordinator", "locator", "cache", "dashboard", "submit"]


def start_node(directory: Path, name: str, components: list[str], seeds: list[str] | None = None,
               sections: dict | None = None, port: int | None = None, **pool: Any) -> NodeProcess:
    """An ``htda-node`` subprocess (its log next to its config); the first is its own seed."""
    port = port or free_port()
    url = f"http://127.0.0.1:{port}"
    if "submit" in components:  # the agent's socket in a directory only root may write, as /run/htda is
        sections = {**(sections or {})}
        sections["submit"] = {"socket": str(shared_dir("htda-ops-agent-") / "submit.sock"),
                              **sections.get("submit", {})}
    config = write_config(directory, name, components, port, seeds or [url], sections=sections, **pool)
    return NodeProcess(config).start()


def unhandled_errors(node: NodeProcess) -> list[str]:
    """Lines of the node's log that report a 500 (a bug): the REST layer logs one per 500."""
    text = node.log.read_text(errors="replace") if node.log.exists() else ""
    return [line for line in text.splitlines() if "unhandled error in" in line]


class Raw:
    """Bytes on the wire, signed by hand or not at all, so tests control every part of a request."""

    def __init__(self, base_url: str, secret: str = SECRET, timeout: float = 10.0):
        self.base_url = base_url.rstrip("/")
        self.signer = Signer(secret.encode())
        self.client = RawClient(timeout=timeout)

    def header(self, method: str, target: str, body: bytes) -> str:
        return "Authorization: " + self.signer.for_url(method, self.base_url + target, body)

    def send(self, method: str, target: str, body: bytes | Any = b"", sign: bool = True,
             headers: list[str] | None = None, auth: str | None = None) -> tuple[int, Any]:
        """Send ``body`` (bytes as they are, anything else as JSON) to ``target`` (path and query).

        ``auth`` replaces the Authorization header (e.g. to replay a captured one).
        Returns the status and the decoded JSON answer (or the raw bytes).
        """
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        extra = list(headers or [])
        if data:
            extra.append("Content-Type: application/json")
        if auth is not None:
            extra.append(auth)
        elif sign:
            extra.append(self.header(method, target, data))
        status, raw = self.client.raw(method, self.base_url + target, data, extra)
        try:
            return status, json.loads(raw)
        except (ValueError, RecursionError):
            return status, raw

    def close(self) -> None:
        self.client.close()


def load_bench():
    """bench/load_bench.py as a module: the load machinery the benchmark and these tests share."""
    return load_bench_script("load_bench.py", "htda_load_bench")

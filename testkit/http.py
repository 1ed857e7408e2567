"""Bytes over HTTP exactly as given, for tests of hostile or malformed input and for benches.

HTDA's own :class:`htda.node.client.Client` encodes JSON and signs what it sends; the tests also need to
send what no member would (unsigned, truncated, oversized or non-JSON bodies, odd headers) and to read
answers as bytes whatever their status: :meth:`Client.exchange <htda.node.client.Client.exchange>`
unsigned, on one kept-alive handle per thread.
"""

from __future__ import annotations

from htda.node.client import Client

__all__ = ["RawClient", "raw"]


class RawClient:
    """Unsigned requests of raw bytes, one kept-alive curl handle per thread (benches reuse connections)."""

    def __init__(self, timeout: float = 10.0, connect_timeout: float = 2.0):
        self._client = Client(secret=None, connect_timeout=connect_timeout, timeout=timeout, retries=0)

    def raw(self, method: str, url: str, body: bytes = b"", headers: list[str] | None = None,
            timeout: float | None = None) -> tuple[int, bytes]:
        """Send ``body`` as it is, with ``headers`` added as they are; return (status, answer bytes).

        Failures to connect or time-outs raise the client's :class:`~htda.node.client.ClientError`\\ s."""
        return self._client.exchange(method, url, body, headers, timeout, sign=False)

    def close(self) -> None:
        self._client.close()


def raw(method: str, url: str, body: bytes = b"", headers: list[str] | None = None,
        timeout: float = 10.0) -> tuple[int, bytes]:
    """One unsigned request of raw bytes on a fresh connection: (status, answer bytes)."""
    client = RawClient(timeout)
    try:
        return client.raw(method, url, body, headers)
    finally:
        client.close()

"""Bytes over HTTP exactly as given, for tests of hostile or malformed input and for benches.

HTDA's own :class:`htda.node.client.Client` only sends what the protocol allows (JSON it encodes, signed);
the tests also need to send what no member would (unsigned, truncated, oversized or non-JSON bodies, odd
headers) and to read answers as bytes whatever their status.  This builds its own PycURL calls.
"""

from __future__ import annotations

import io
import threading

import pycurl

from htda.node.client import ClientError, ConnectError, Timeout

__all__ = ["RawClient", "raw"]

_TIMEOUTS = {pycurl.E_OPERATION_TIMEDOUT}
_CONNECTS = {pycurl.E_COULDNT_CONNECT, pycurl.E_COULDNT_RESOLVE_HOST, pycurl.E_SSL_CONNECT_ERROR, pycurl.E_SEND_ERROR,
             pycurl.E_RECV_ERROR, pycurl.E_GOT_NOTHING}


class RawClient:
    """Unsigned requests of raw bytes, one kept-alive curl handle per thread (benches reuse connections)."""

    def __init__(self, timeout: float = 10.0, connect_timeout: float = 2.0):
        self.timeout, self.connect_timeout = timeout, connect_timeout
        self._local = threading.local()

    def raw(self, method: str, url: str, body: bytes = b"", headers: list[str] | None = None,
            timeout: float | None = None) -> tuple[int, bytes]:
        """Send ``body`` as it is, with ``headers`` added as they are; return (status, answer bytes).

        Failures to connect or time-outs raise the client's :class:`~htda.node.client.ClientError`\\ s."""
        timeout = self.timeout if timeout is None else timeout
        curl = getattr(self._local, "curl", None)
        if curl is None:
            curl = self._local.curl = pycurl.Curl()
            curl.setopt(pycurl.NOSIGNAL, 1)
            curl.setopt(pycurl.TCP_NODELAY, 1)
            curl.setopt(pycurl.PATH_AS_IS, 1)  # send paths as they are, never "normalised"
        buf = io.BytesIO()
        sent = ["Accept: application/json", "Expect:", *(["Content-Type: application/json"] if body else []),
                *(headers or ())]
        curl.setopt(pycurl.URL, url)
        curl.setopt(pycurl.CUSTOMREQUEST, method)
        curl.setopt(pycurl.NOBODY, 1 if method == "HEAD" else 0)
        curl.setopt(pycurl.HTTPHEADER, sent)
        curl.setopt(pycurl.POSTFIELDSIZE, len(body))
        curl.setopt(pycurl.POSTFIELDS, body)
        if method == "GET" and not body:
            curl.setopt(pycurl.HTTPGET, 1)
            curl.setopt(pycurl.CUSTOMREQUEST, "GET")
        curl.setopt(pycurl.WRITEFUNCTION, buf.write)
        curl.setopt(pycurl.CONNECTTIMEOUT_MS, max(1, int(min(self.connect_timeout, timeout) * 1000)))
        curl.setopt(pycurl.TIMEOUT_MS, max(1, int(timeout * 1000)))
        try:
            curl.perform()
        except pycurl.error as exc:
            code, message = exc.args[0], exc.args[1] if len(exc.args) > 1 else str(exc)
            self.close()  # a handle in an unknown state is not reused
            if code in _TIMEOUTS:
                raise Timeout(f"timed out after {timeout:g}s: {message}", url) from None
            if code in _CONNECTS:
                raise ConnectError(f"cannot reach peer: {message}", url) from None
            raise ClientError(f"curl error {code}: {message}", url) from None
        return curl.getinfo(pycurl.RESPONSE_CODE), buf.getvalue()

    def close(self) -> None:
        curl = getattr(self._local, "curl", None)
        if curl is not None:
            curl.close()
            self._local.curl = None


def raw(method: str, url: str, body: bytes = b"", headers: list[str] | None = None,
        timeout: float = 10.0) -> tuple[int, bytes]:
    """One unsigned request of raw bytes on a fresh connection: (status, answer bytes)."""
    client = RawClient(timeout)
    try:
        return client.raw(method, url, body, headers)
    finally:
        client.close()

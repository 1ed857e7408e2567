"""REST client on PycURL.

One curl handle per thread and client, so connections are reused (keep-alive)
without locking.  Every call has a connect timeout and a total timeout;
idempotent calls are retried a bounded number of times with exponential
backoff and jitter.  Failures raise subclasses of :class:`ClientError`.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable
from typing import Any

import pycurl

from .auth import Signer

__all__ = ["Client", "ClientError", "ConnectError", "Timeout", "HTTPStatusError", "BadResponse"]


class ClientError(Exception):
    """Base class of every client failure."""

    def __init__(self, message: str, url: str = ""):
        super().__init__(f"{message} ({url})" if url else message)
        self.url = url


class ConnectError(ClientError):
    """The peer could not be reached (refused, unresolvable, TLS handshake)."""


class Timeout(ClientError):
    """The connect or total timeout ran out."""


class BadResponse(ClientError):
    """The peer answered something that is not the JSON it should be."""


class HTTPStatusError(ClientError):
    """The peer answered with an error status; ``payload`` is its JSON error, if any."""

    def __init__(self, status: int, message: str, url: str, payload: Any = None):
        super().__init__(f"HTTP {status}: {message}", url)
        self.status, self.payload = status, payload


_TIMEOUT_CODES = {pycurl.E_OPERATION_TIMEDOUT}
_CONNECT_CODES = {pycurl.E_COULDNT_CONNECT, pycurl.E_COULDNT_RESOLVE_HOST, pycurl.E_SSL_CONNECT_ERROR,
                  pycurl.E_SEND_ERROR, pycurl.E_RECV_ERROR, pycurl.E_GOT_NOTHING,
                  getattr(pycurl, "E_PEER_FAILED_VERIFICATION", 60)}


class Client:
    """JSON over HTTP(S) to pool members, signing requests when given a secret."""

    def __init__(self, secret: bytes | None = None, connect_timeout: float = 2.0, timeout: float = 10.0,
                 retries: int = 2, backoff: float = 0.1, ca_file: str | None = None,
                 client_cert: str | None = None, client_key: str | None = None, verify: bool = True):
        self.signer = Signer(secret) if secret else None
        self.connect_timeout, self.timeout = connect_timeout, timeout
        self.retries, self.backoff = retries, backoff
        self.ca_file, self.client_cert, self.client_key, self.verify = ca_file, client_cert, client_key, verify
        self._local = threading.local()

    def _handle(self) -> pycurl.Curl:
        curl = getattr(self._local, "curl", None)
        if curl is None:
            curl = pycurl.Curl()
            curl.setopt(pycurl.NOSIGNAL, 1)
            curl.setopt(pycurl.TCP_NODELAY, 1)
            curl.setopt(pycurl.PATH_AS_IS, 1)  # send paths as signed, never "normalised"
            if self.ca_file:
                curl.setopt(pycurl.CAINFO, self.ca_file)
            if self.client_cert:
                curl.setopt(pycurl.SSLCERT, self.client_cert)
                curl.setopt(pycurl.SSLKEY, self.client_key or self.client_cert)
            if not self.verify:
                curl.setopt(pycurl.SSL_VERIFYPEER, 0)
                curl.setopt(pycurl.SSL_VERIFYHOST, 0)
            self._local.curl = curl
        return curl

    def close(self) -> None:
        curl = getattr(self._local, "curl", None)
        if curl is not None:
            curl.close()
            self._local.curl = None

    # -- public calls ----------------------------------------------------
    def get(self, url: str, timeout: float | None = None, retries: int | None = None) -> Any:
        return self.request("GET", url, timeout=timeout, retries=retries, idempotent=True)

    def post(self, url: str, payload: Any, timeout: float | None = None, idempotent: bool = False,
             retries: int | None = None) -> Any:
        return self.request("POST", url, payload, timeout=timeout, retries=retries, idempotent=idempotent)

    def request(self, method: str, url: str, payload: Any = None, timeout: float | None = None,
                retries: int | None = None, idempotent: bool | None = None) -> Any:
        """Send a request and return the decoded JSON answer.

        Retries happen only for idempotent calls (GET by default, or when the
        caller says so) and only on connection failures, timeouts and 503.
        """
        body = b"" if payload is None else json.dumps(payload, separators=(",", ":")).encode()
        idempotent = method == "GET" if idempotent is None else idempotent
        attempts = 1 + ((self.retries if retries is None else retries) if idempotent else 0)
        delay = self.backoff
        for attempt in range(attempts):
            try:
                status, raw = self._perform(method, url, body, self.timeout if timeout is None else timeout)
                return _decode(status, raw, url)
            except (ConnectError, Timeout) as exc:
                error: ClientError = exc
            except HTTPStatusError as exc:
                if exc.status != 503:
                    raise
                error = exc
            if attempt + 1 < attempts:
                time.sleep(delay * (1 + random.random()))
                delay *= 2
        raise error

    def fetch(self, url: str, headers: list[str] | None = None, timeout: float | None = None,
              max_bytes: int = 64 << 20) -> tuple[int, dict[str, str], bytes]:
        """A signed GET answered in raw bytes (a byte range of a copy, say): return (status, headers, body).

        ``headers`` are added as they are (``Range: bytes=0-99``); answer header names are lower case.  An
        answer longer than ``max_bytes`` ends the transfer (:class:`BadResponse`).  Not retried: the
        caller knows which ranges it still needs.
        """
        answer: dict[str, str] = {}

        def header(line: bytes) -> None:
            name, sep, value = line.decode("latin-1").partition(":")
            if sep:
                answer[name.strip().lower()] = value.strip()
            elif name.startswith("HTTP/"):
                answer.clear()  # a new answer (after a 100 Continue, say): only the last one counts

        status, raw = self._perform("GET", url, b"", self.timeout if timeout is None else timeout, headers,
                                    answer_headers=header, max_bytes=max_bytes)
        return status, answer, raw

    def text(self, url: str, timeout: float | None = None) -> str:
        """An unsigned GET of a page that is not JSON (``/metrics``, readable from the pool's read networks
        without a signature): its body as text.  Not retried; an error status is an :class:`HTTPStatusError`."""
        status, raw = self.exchange("GET", url, timeout=timeout, sign=False)
        if status >= 400:
            raise HTTPStatusError(status, raw[:200].decode("utf-8", "replace"), url)
        return raw.decode("utf-8", "replace")

    def exchange(self, method: str, url: str, body: bytes = b"", headers: list[str] | None = None,
                 timeout: float | None = None, sign: bool = True) -> tuple[int, bytes]:
        """One request of bytes as they are, answered in bytes whatever its status: (status, body).

        For callers that read the status themselves (probes, tools that show an error page); ``headers``
        are added as they are.  Not retried; failures to connect and time-outs raise as for
        :meth:`request`.
        """
        return self._perform(method, url, body, self.timeout if timeout is None else timeout, headers, sign=sign)

    # -- internals ---------------------------------------------------------
    def _perform(self, method: str, url: str, body: bytes, timeout: float,
                 extra_headers: list[str] | None = None, sign: bool = True,
                 answer_headers: Callable[[bytes], None] | None = None,
                 max_bytes: int | None = None) -> tuple[int, bytes]:
        curl = self._handle()
        # the answer's pieces, joined once at the end: a BytesIO re-grows (and copies) its buffer many times
        # over for a range of megabytes, which cost a cache node's peer copies a fifth of their CPU
        pieces: list[bytes] = []
        received = 0
        overflow = False

        def write(data: bytes) -> int | None:
            nonlocal overflow, received
            received += len(data)
            if max_bytes is not None and received > max_bytes:
                overflow = True
                return 0  # curl ends the transfer (a write error)
            pieces.append(data)
            return None
        headers = ["Accept: application/json", "Expect:"]
        if body:
            headers.append("Content-Type: application/json")
        if sign and self.signer is not None:
            # Signed for the authority called, so the request is worth nothing at any other node.
            headers.append("Authorization: " + self.signer.for_url(method, url, body))
        headers.extend(extra_headers or ())
        curl.setopt(pycurl.URL, url)
        curl.setopt(pycurl.CUSTOMREQUEST, method)
        curl.setopt(pycurl.NOBODY, 1 if method == "HEAD" else 0)
        curl.setopt(pycurl.HTTPHEADER, headers)
        curl.setopt(pycurl.POSTFIELDSIZE, len(body))
        curl.setopt(pycurl.POSTFIELDS, body)
        if method == "GET" and not body:
            curl.setopt(pycurl.HTTPGET, 1)
            curl.setopt(pycurl.CUSTOMREQUEST, "GET")
        curl.setopt(pycurl.WRITEFUNCTION, write)
        curl.setopt(pycurl.HEADERFUNCTION, answer_headers or (lambda line: None))
        curl.setopt(pycurl.CONNECTTIMEOUT_MS, max(1, int(min(self.connect_timeout, timeout) * 1000)))
        curl.setopt(pycurl.TIMEOUT_MS, max(1, int(timeout * 1000)))
        try:
            curl.perform()
        except pycurl.error as exc:
            code, message = exc.args[0], exc.args[1] if len(exc.args) > 1 else str(exc)
            self.close()  # a handle in an unknown state is not reused
            if overflow:
                raise BadResponse(f"answer longer than {max_bytes} bytes", url) from None
            if code in _TIMEOUT_CODES:
                raise Timeout(f"timed out after {timeout:g}s: {message}", url) from None
            if code in _CONNECT_CODES:
                raise ConnectError(f"cannot reach peer: {message}", url) from None
            raise ClientError(f"curl error {code}: {message}", url) from None
        return curl.getinfo(pycurl.RESPONSE_CODE), b"".join(pieces)


def _decode(status: int, raw: bytes, url: str) -> Any:
    try:
        payload = json.loads(raw) if raw else None
    except ValueError:
        payload = None
        if status < 400:
            raise BadResponse(f"answer is not JSON: {raw[:80]!r}", url) from None
    if status >= 400:
        message = raw[:200].decode("utf-8", "replace")
        if isinstance(payload, dict) and isinstance(payload.get("error"), dict):
            message = str(payload["error"].get("message", message))
        raise HTTPStatusError(status, message, url, payload)
    return payload

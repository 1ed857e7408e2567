"""Request signing with the pool secret.

A signed request carries::

    Authorization: HTDA-HMAC ts=<unix seconds>,nonce=<hex>,sig=<hex>

where ``sig`` is HMAC-SHA256(secret, METHOD \\n PATH?QUERY \\n ts \\n nonce \\n
SHA256(body)).  The verifier accepts a timestamp within ``window`` seconds of
its clock and remembers every nonce it accepted for twice that long, so a
captured request cannot be replayed: within the window the nonce is known,
after it the timestamp is stale.  Signatures are compared with
``hmac.compare_digest`` (constant time).

A node that restarts forgets its nonces; a request captured less than
``window`` seconds before the restart could then be replayed once.  Keep the
window short (default 30 s) or use HTTPS, which hides requests from capture.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import threading
import time
from collections import OrderedDict

__all__ = ["AuthError", "Signer", "Verifier", "load_secret", "new_secret", "SCHEME"]

SCHEME = "HTDA-HMAC"
_EMPTY_BODY_HASH = hashlib.sha256(b"").hexdigest()


class AuthError(Exception):
    """A request failed authentication; the message says why (safe to show)."""


def new_secret() -> str:
    """A fresh random pool secret (256 bits, hex)."""
    return secrets.token_hex(32)


def load_secret(path: str) -> bytes:
    """Read a pool secret file, refusing one that other users can read."""
    mode = os.stat(path).st_mode
    if mode & 0o077:
        raise AuthError(f"{path}: pool secret must not be readable by group or others (chmod 600)")
    with open(path, "rb") as fh:
        secret = fh.read().strip()
    if len(secret) < 16:
        raise AuthError(f"{path}: pool secret is shorter than 16 bytes")
    return secret


def _message(method: str, target: str, ts: str, nonce: str, body: bytes) -> bytes:
    body_hash = hashlib.sha256(body).hexdigest() if body else _EMPTY_BODY_HASH
    return "\n".join((method.upper(), target, ts, nonce, body_hash)).encode()


class Signer:
    """Produces the Authorization header for outgoing requests."""

    def __init__(self, secret: bytes):
        self._secret = secret

    def header(self, method: str, target: str, body: bytes = b"", now: float | None = None) -> str:
        ts = str(int(time.time() if now is None else now))
        nonce = secrets.token_hex(12)
        sig = hmac.new(self._secret, _message(method, target, ts, nonce, body), hashlib.sha256).hexdigest()
        return f"{SCHEME} ts={ts},nonce={nonce},sig={sig}"


class Verifier:
    """Checks signed requests: signature, timestamp window and nonce reuse."""

    def __init__(self, secret: bytes, window: float = 30.0, max_nonces: int = 1_000_000):
        self._secret = secret
        self._window = window
        self._max_nonces = max_nonces
        self._seen: OrderedDict[str, float] = OrderedDict()
        self._lock = threading.Lock()

    def verify(self, method: str, target: str, header: str | None, body: bytes, now: float | None = None) -> None:
        """Return quietly for a good request; raise :class:`AuthError` otherwise."""
        if not header:
            raise AuthError("missing Authorization header")
        scheme, _, params = header.partition(" ")
        if scheme != SCHEME:
            raise AuthError(f"unsupported authorization scheme (expected {SCHEME})")
        fields = dict(part.partition("=")[::2] for part in params.split(","))
        ts, nonce, sig = fields.get("ts", ""), fields.get("nonce", ""), fields.get("sig", "")
        if not (ts.isdigit() and nonce and sig):
            raise AuthError("malformed Authorization header")
        expected = hmac.new(self._secret, _message(method, target, ts, nonce, body), hashlib.sha256).hexdigest()
        if not hmac.compare_digest(expected, sig):
            raise AuthError("bad signature")
        now = time.time() if now is None else now
        if abs(now - int(ts)) > self._window:
            raise AuthError("stale timestamp (check the clocks, or replayed request)")
        self._remember(nonce, now)

    def _remember(self, nonce: str, now: float) -> None:
        with self._lock:
            horizon = now - 2 * self._window
            while self._seen:
                oldest, seen_at = next(iter(self._seen.items()))
                if seen_at >= horizon and len(self._seen) < self._max_nonces:
                    break
                self._seen.popitem(last=False)
            if nonce in self._seen:
                raise AuthError("replayed request")
            self._seen[nonce] = now

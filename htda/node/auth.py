"""Request signing with the pool secret, and which client certificates are members.

A signed request carries::

    Authorization: HTDA-HMAC ts=<unix seconds>,nonce=<hex>,to=<host:port>,bodyhash=<hex>,sig=<hex>

where ``to`` is the authority the sender called (host and port of the URL,
lower case, the scheme's default port filled in), ``bodyhash`` the SHA-256
of the body and ``sig`` HMAC-SHA256(secret, ``HTDA-HMAC-2`` \\n METHOD \\n
PATH?QUERY \\n ts \\n nonce \\n to \\n bodyhash).

Everything the receiver must check is in the header, so it checks it before
it reads a single byte of the body: the signature, the timestamp (within
``window`` seconds of its clock), the nonce (remembered for twice the window,
so a captured request cannot be replayed: within the window the nonce is
known, after it the timestamp is stale) and the receiver (one of its own
names, so a request captured on its way to one node cannot be replayed to
another).  Only then is the body read, and its hash compared with the signed
one.  Signatures are compared with ``hmac.compare_digest`` (constant time).

A node that restarts forgets its nonces; a request captured less than
``window`` seconds before the restart could then be replayed once, to that
node only.  Keep the window short (default 30 s) or use HTTPS, which hides
requests from capture.
"""

from __future__ import annotations

import fnmatch
import hashlib
import hmac
import os
import re
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

__all__ = ["AuthError", "Signer", "Verifier", "CertificatePolicy", "load_secret", "new_secret", "authority",
           "host_port", "request_target", "body_hash", "check_body", "certificate_names", "describe_certificate",
           "SCHEME"]

SCHEME = "HTDA-HMAC"
_VERSION = "HTDA-HMAC-2"  # first line of the signed message: a signature of another format never verifies
_DEFAULT_PORTS = {"http": 80, "https": 443}
_HEX = re.compile(r"^[0-9a-f]+$")


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


def body_hash(body: bytes) -> str:
    """The hex SHA-256 of a request body, as signed."""
    return hashlib.sha256(body).hexdigest()


def authority(url: str) -> str:
    """``host:port`` of an http(s) URL as a signature names it: lower case, IPv6 in brackets, port explicit."""
    parts = urlsplit(url)
    if parts.scheme not in _DEFAULT_PORTS or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {url!r}")
    return host_port(parts.hostname, parts.port or _DEFAULT_PORTS[parts.scheme])


def host_port(host: str, port: int) -> str:
    """One receiver name: ``host:port`` normalised like :func:`authority`."""
    host = host.strip("[]").lower()
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def request_target(url: str) -> str:
    """The request target of a URL (path and query) exactly as it goes on the wire and is signed."""
    parts = urlsplit(url)
    return (parts.path or "/") + ("?" + parts.query if parts.query else "")


def _message(method: str, target: str, ts: str, nonce: str, receiver: str, digest: str) -> bytes:
    return "\n".join((_VERSION, method.upper(), target, ts, nonce, receiver, digest)).encode()


class Signer:
    """Produces the Authorization header for outgoing requests."""

    def __init__(self, secret: bytes):
        self._secret = secret

    def header(self, method: str, target: str, body: bytes = b"", now: float | None = None, *,
               receiver: str) -> str:
        """Sign ``method target`` with ``body`` for ``receiver`` (``host:port`` the request is sent to)."""
        ts = str(int(time.time() if now is None else now))
        nonce = secrets.token_hex(12)
        receiver = receiver.lower()
        digest = body_hash(body)
        sig = hmac.new(self._secret, _message(method, target, ts, nonce, receiver, digest), hashlib.sha256)
        return f"{SCHEME} ts={ts},nonce={nonce},to={receiver},bodyhash={digest},sig={sig.hexdigest()}"

    def for_url(self, method: str, url: str, body: bytes = b"", now: float | None = None) -> str:
        """Sign a request to ``url``: its path and query, and its authority as the receiver."""
        return self.header(method, request_target(url), body, now, receiver=authority(url))


@dataclass(frozen=True)
class _Fields:
    ts: str
    nonce: str
    receiver: str
    digest: str
    sig: str


def _parse(header: str | None) -> _Fields:
    if not header:
        raise AuthError("missing Authorization header")
    scheme, _, params = header.partition(" ")
    if scheme != SCHEME:
        raise AuthError(f"unsupported authorization scheme (expected {SCHEME})")
    fields = dict(part.partition("=")[::2] for part in params.split(","))
    parsed = _Fields(fields.get("ts", ""), fields.get("nonce", ""), fields.get("to", ""),
                     fields.get("bodyhash", ""), fields.get("sig", ""))
    if not (parsed.ts.isdigit() and parsed.nonce and parsed.sig):
        raise AuthError("malformed Authorization header")
    if not parsed.receiver or not (len(parsed.digest) == 64 and _HEX.match(parsed.digest)):
        raise AuthError("Authorization header names no receiver or body hash (a sender older than this node?)")
    return parsed


class Verifier:
    """Checks signed requests: signature, receiver, timestamp window, nonce reuse and body hash."""

    def __init__(self, secret: bytes, window: float = 30.0, max_nonces: int = 1_000_000):
        self._secret = secret
        self._window = window
        self._max_nonces = max_nonces
        self._seen: OrderedDict[str, float] = OrderedDict()
        self._lock = threading.Lock()  # guards _seen (the nonce cache), shared by every REST worker

    @property
    def remembered_nonces(self) -> int:
        """How many nonces the replay check holds now (bounded by ``max_nonces``)."""
        with self._lock:
            return len(self._seen)

    def check(self, method: str, target: str, header: str | None, receivers: Collection[str],
              now: float | None = None) -> str:
        """Check everything the header says, before the body is read; return the signed body hash.

        ``receivers`` are this node's own names (``host:port``, see :func:`host_port`).
        Raises :class:`AuthError`; a request that passes has used up its nonce.
        """
        fields = _parse(header)
        message = _message(method, target, fields.ts, fields.nonce, fields.receiver, fields.digest)
        expected = hmac.new(self._secret, message, hashlib.sha256).hexdigest()
        if not hmac.compare_digest(expected, fields.sig):
            raise AuthError("bad signature")
        if fields.receiver not in receivers:
            raise AuthError(f"signed for {fields.receiver}, not for this node ({', '.join(sorted(receivers))})")
        now = time.time() if now is None else now
        if abs(now - int(fields.ts)) > self._window:
            raise AuthError("stale timestamp (check the clocks, or replayed request)")
        self._remember(fields.nonce, now)
        return fields.digest

    def verify(self, method: str, target: str, header: str | None, body: bytes, receivers: Collection[str],
               now: float | None = None) -> None:
        """:meth:`check` the header, then the body against its signed hash."""
        check_body(self.check(method, target, header, receivers, now), body)

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


def check_body(signed_hash: str, body: bytes) -> None:
    """Raise :class:`AuthError` unless ``body`` is the one whose hash was signed."""
    if not hmac.compare_digest(signed_hash, body_hash(body)):
        raise AuthError("body does not match its signed hash")


class CertificatePolicy:
    """Which client certificates (already verified against the pool CA) are pool members.

    Each pattern is ``cn:GLOB`` (the subject's common name), ``dns:GLOB``
    (a DNS name of the subject alternative names) or ``dn:SUBJECT`` (the
    whole subject, RFC 4514, e.g. ``dn:CN=worker1,O=Physics``).  Globs know
    ``*`` and ``?`` only and match case-insensitively; ``cn:*`` admits every
    certificate the CA signed.
    """

    KINDS = ("cn", "dns", "dn")

    def __init__(self, patterns: Iterable[str]):
        self.patterns: list[tuple[str, str]] = []
        for pattern in patterns:
            problem = self.problem(pattern)
            if problem:
                raise ValueError(problem)
            kind, _, value = pattern.partition(":")
            self.patterns.append((kind.lower(), value.lower()))

    @classmethod
    def problem(cls, pattern: str) -> str | None:
        """Why ``pattern`` is not a valid allow-list entry, or None."""
        kind, sep, value = pattern.partition(":")
        if not sep or kind.lower() not in cls.KINDS:
            return f"{pattern!r}: must start with cn:, dns: or dn:"
        if not value.strip() or value != value.strip():
            return f"{pattern!r}: empty pattern or surrounding blanks"
        if "[" in value and kind.lower() != "dn":
            return f"{pattern!r}: only * and ? are wildcards"
        return None

    def allows(self, cert: dict[str, Any] | None) -> bool:
        """Whether a certificate as :meth:`ssl.SSLSocket.getpeercert` gives it is on the list."""
        if not cert:
            return False
        names = certificate_names(cert)
        return any(fnmatch.fnmatchcase(name, value) if kind != "dn" else name == value
                   for kind, value in self.patterns for name in names.get(kind, ()))


def certificate_names(cert: dict[str, Any]) -> dict[str, list[str]]:
    """A certificate's common names, SAN DNS names and RFC 4514 subject, lower case."""
    rdns = [attr for rdn in cert.get("subject", ()) for attr in rdn]
    common = [value.lower() for key, value in rdns if key == "commonName"]
    dns = [value.lower() for key, value in cert.get("subjectAltName", ()) if key == "DNS"]
    subject = ",".join(f"{_DN_KEYS.get(key, key)}={value}" for key, value in reversed(rdns)).lower()
    return {"cn": common, "dns": dns, "dn": [subject]}


def describe_certificate(cert: dict[str, Any] | None) -> str:
    """A certificate's subject for log lines."""
    return certificate_names(cert)["dn"][0] if cert else "no certificate"


_DN_KEYS = {"commonName": "CN", "organizationName": "O", "organizationalUnitName": "OU", "countryName": "C",
            "localityName": "L", "stateOrProvinceName": "ST", "domainComponent": "DC"}

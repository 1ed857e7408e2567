"""The node's REST layer: a route table served as JSON over HTTP(S).

Components contribute :class:`Route` objects; one :class:`RestApp` per node
matches them, enforces access rules, checks request bodies against their
schemas, maps errors to JSON answers and counts requests for ``/metrics``.
The same table produces the OpenAPI document, so the two cannot disagree.

Authorisation happens on the headers alone, before a byte of the body is
read: a request that is not allowed, or whose body is over its limit, is
answered and its connection closed with the body unread.  Bodies that arrive
without a signature (public routes, read-only networks) are capped at
:data:`UNSIGNED_BODY` unless their route declares more.

The server is cheroot, CherryPy's HTTP/WSGI server, used directly so that
several nodes can live in one process (tests, benchmarks) without CherryPy's
process-global engine; its connections wait in a :class:`~htda.node.gate.Gate`
until their request has arrived, so slow or silent clients hold no worker.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import re
import socket
import ssl
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import parse_qsl

import msgspec
from cheroot import wsgi
from cheroot.ssl.builtin import BuiltinSSLAdapter

from ..protocol.base import Endpoint, ProtocolError, encode
from ..protocol.base import decode as decode_body
from .auth import AuthError, CertificatePolicy, Verifier, check_body, describe_certificate, host_port
from .gate import GatedServerMixin, GateOptions
from .metrics import Registry

__all__ = ["HTTPError", "Request", "Response", "Route", "RestApp", "RestServer", "API", "decode_json",
           "UNSIGNED_BODY", "receiver_names"]

log = logging.getLogger("htda.rest")

A = TypeVar("A")

API = "/api/v1"

#: the largest body accepted without a signature, unless the route declares more
UNSIGNED_BODY = 8 * 1024

_REASONS = {
    200: "OK", 201: "Created", 202: "Accepted", 204: "No Content", 400: "Bad Request",
    401: "Unauthorized", 403: "Forbidden", 404: "Not Found", 405: "Method Not Allowed",
    409: "Conflict", 411: "Length Required", 413: "Payload Too Large", 415: "Unsupported Media Type",
    422: "Unprocessable Entity", 429: "Too Many Requests", 500: "Internal Server Error",
    503: "Service Unavailable",
}


class HTTPError(Exception):
    """Raise from a handler to answer with ``status`` and a JSON error body."""

    def __init__(self, status: int, message: str, **details: Any):
        super().__init__(message)
        self.status, self.message, self.details = status, message, details


@dataclass
class Response:
    """A non-JSON (or non-200) answer."""

    body: bytes | str
    status: int = 200
    content_type: str = "application/json"
    headers: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class Route:
    """One endpoint.

    ``access`` is ``"public"`` (anyone), ``"read"`` (signed, or from a
    configured read-only network) or ``"auth"`` (signed by a pool member).
    It defaults to ``"read"`` for GET and ``"auth"`` for everything else, so
    every state-changing request is authenticated unless a route says
    otherwise on purpose.  ``body`` is the type of the request body (a
    :class:`htda.protocol.base.Body` struct: :attr:`Request.data` decodes and
    checks it, 400 naming the field otherwise) and ``response`` the type of a
    200 answer; both are in the OpenAPI document with their schemas.
    :meth:`of` takes both, the method and the path from an
    :class:`~htda.protocol.base.Endpoint` of :mod:`htda.protocol`.
    ``example`` is a typical 200 answer, shown in the OpenAPI document and the
    REST reference (a test checks each fits ``response`` and has the keys the
    real answer has).

    ``max_body`` caps an authenticated body (default: the node's
    ``max_body``).  A body that comes without a signature (a public route,
    or a read route called from a read network) is capped at
    ``unsigned_body``, which defaults to ``max_body`` on a public route
    that sets one (its bodies are never signed) and to
    :data:`UNSIGNED_BODY` otherwise.
    """

    method: str
    path: str
    handler: Callable[["Request"], Any]
    summary: str
    body: type[Any] | None = None
    response: type[Any] | None = None
    query: dict[str, str] = field(default_factory=dict)  # name -> description
    access: str | None = None
    tag: str = "node"
    max_body: int | None = None
    content_type: str = "application/json"
    unsigned_body: int | None = None
    example: Any = None
    #: request headers the handler reads, name -> description (documented as header parameters)
    headers: dict[str, str] = field(default_factory=dict)
    #: answers besides 200 and the errors every route may give, status -> description (documented)
    statuses: dict[int, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.method = self.method.upper()
        if self.access is None:
            self.access = "read" if self.method == "GET" else "auth"
        if self.access not in ("public", "read", "auth"):
            raise ValueError(f"{self.path}: access must be public, read or auth")
        pattern, self.params = _compile(self.path)
        self.regex = re.compile(pattern)
        if self.unsigned_body is None:
            public_limit = self.max_body if self.access == "public" else None
            self.unsigned_body = public_limit or UNSIGNED_BODY

    @classmethod
    def of(cls, endpoint: Endpoint[A], handler: Callable[["Request"], A | Response | dict[str, Any]], summary: str,
           **options: Any) -> "Route":
        """The route serving ``endpoint`` (its method, path, body and answer types) with ``handler``, which
        answers with the endpoint's answer type (checked by mypy), a ready :class:`Response`, or plain JSON
        values (checked by the tests against the answer type)."""
        return cls(endpoint.method, endpoint.path, handler, summary, body=endpoint.request,
                   response=endpoint.response, **options)


def _compile(path: str) -> tuple[str, list[str]]:
    params: list[str] = []
    out = []
    for part in re.split(r"(\{[^}]+\})", path):
        if part.startswith("{"):
            name, _, kind = part[1:-1].partition(":")
            params.append(name)
            out.append(f"(?P<{name}>.+)" if kind == "path" else f"(?P<{name}>[^/]+)")
        else:
            out.append(re.escape(part))
    return "^" + "".join(out) + "$", params


class Request:
    """What a handler sees of a request."""

    __slots__ = ("method", "path", "target", "query", "params", "body", "remote", "headers", "route", "_json",
                 "_data", "client_cert")

    def __init__(self, method: str, path: str, target: str, query: dict[str, str], params: dict[str, str],
                 body: bytes, remote: str, headers: dict[str, str], route: Route, client_cert: bool):
        self.method, self.path, self.target, self.query, self.params = method, path, target, query, params
        self.body, self.remote, self.headers, self.route = body, remote, headers, route
        self.client_cert = client_cert
        self._json: Any = _UNSET
        self._data: Any = _UNSET

    @property
    def data(self) -> Any:
        """The body decoded into the route's ``body`` type (400 naming the place if it does not fit)."""
        if self._data is _UNSET:
            if self.route.body is None:
                raise TypeError(f"{self.route.path} declares no body type")
            try:
                self._data = decode_body(self.body, self.route.body)
            except ProtocolError as exc:
                raise HTTPError(400, str(exc)) from None
        return self._data

    @property
    def json(self) -> Any:
        """The body parsed as plain JSON (checked against the route's ``body`` type first, if it has one)."""
        if self._json is _UNSET:
            if self.route.body is not None:
                self.data  # noqa: B018 - checks the body
            self._json = decode_json(self.body)
        return self._json

    def query_int(self, name: str, default: int, lo: int = 0, hi: int = 1_000_000) -> int:
        """An integer query parameter within [lo, hi] (400 otherwise)."""
        raw = self.query.get(name)
        if raw is None:
            return default
        try:
            value = int(raw)
        except ValueError:
            raise HTTPError(400, f"query parameter '{name}' must be an integer") from None
        if not lo <= value <= hi:
            raise HTTPError(400, f"query parameter '{name}' must be between {lo} and {hi}")
        return value


_UNSET = object()


def decode_json(body: bytes) -> Any:
    """Parse a request body as JSON, turning every kind of bad input into a 400."""
    if not body:
        raise HTTPError(400, "request body must be JSON")
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise HTTPError(400, f"request body is not valid JSON: {exc}") from None
    except RecursionError:
        raise HTTPError(400, "request body is nested too deeply") from None


@dataclass(frozen=True)
class _Grant:
    """What authorisation allowed, decided before the body is read."""

    limit: int  # the largest body to read
    signed_hash: str | None = None  # the body hash the signature vouches for


class RestApp:
    """The WSGI application: routing, access control, errors, metrics.

    ``receivers`` are this node's own names (``host:port``): a signature
    made for any other receiver is refused.  :class:`RestServer` adds the
    address it listens on; the node adds its advertised URL and aliases.
    """

    def __init__(self, verifier: Verifier | None, read_networks: Iterable[str] = (),
                 max_body: int = 16 * 1024 * 1024, metrics: Registry | None = None,
                 trust_client_certs: bool = False):
        self.routes: list[Route] = []
        self.verifier = verifier
        self.read_networks = [ipaddress.ip_network(n, strict=False) for n in read_networks]
        self.max_body = max_body
        self.trust_client_certs = trust_client_certs
        self.receivers: set[str] = set()
        self.metrics = metrics or Registry()
        self._requests = self.metrics.counter(
            "htda_http_requests_total", "HTTP requests served, by route and status", ("method", "route", "status"))
        self._seconds = self.metrics.counter(
            "htda_http_request_seconds_total", "Time spent serving HTTP requests, by route", ("method", "route"))

    def add(self, routes: Iterable[Route]) -> None:
        for route in routes:
            for other in self.routes:
                if other.method == route.method and other.path == route.path:
                    raise ValueError(f"route {route.method} {route.path} registered twice")
            self.routes.append(route)

    def add_receivers(self, names: Iterable[str]) -> None:
        """Names (``host:port``) that signatures addressed to this node may carry."""
        self.receivers.update(name.lower() for name in names)

    # -- WSGI ------------------------------------------------------------
    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        started = time.perf_counter()
        route: Route | None = None
        request: Request | None = None
        try:
            route, params = self._match(environ["REQUEST_METHOD"], environ.get("PATH_INFO", "/"))
            request = self._request(environ, route, params)
            size = self._content_length(environ, route)
            grant = self._authorize(request)
            request.body = self._read_body(environ, size, grant)
            result = route.handler(request)
            response = result if isinstance(result, Response) else Response(_dumps(result))
        except HTTPError as exc:
            response = _error(exc.status, exc.message, exc.details)
        except Exception as exc:  # noqa: BLE001 - any bug becomes a logged 500, never a dead server
            log.error("unhandled error in %s %s: %s\n%s", environ.get("REQUEST_METHOD"),
                      environ.get("PATH_INFO"), exc, traceback.format_exc())
            response = _error(500, "internal error (see the node's log)")
        label = route.path if route else "unmatched"
        method = environ.get("REQUEST_METHOD", "")
        self._requests.inc(method=method, route=label, status=str(response.status))
        self._seconds.inc(time.perf_counter() - started, method=method, route=label)
        body = response.body.encode() if isinstance(response.body, str) else response.body
        headers = [("Content-Type", response.content_type), ("Content-Length", str(len(body))), *response.headers]
        if _body_left_unread(environ, request):
            # Reading (or draining) a body nobody may send is what an attacker wants us to do: answer and close.
            headers.append(("Connection", "close"))
        start_response(f"{response.status} {_REASONS.get(response.status, 'Status')}", headers)
        return [body] if len(body) <= _PIECE else _pieces(body)

    def _match(self, method: str, path: str) -> tuple[Route, dict[str, str]]:
        allowed = []
        for route in self.routes:
            m = route.regex.match(path)
            if m:
                if route.method == method or (method == "HEAD" and route.method == "GET"):
                    return route, m.groupdict()
                allowed.append(route.method)
        if allowed:
            raise HTTPError(405, f"method {method} not allowed on {path}", allow=sorted(set(allowed)))
        raise HTTPError(404, f"no such endpoint: {path}")

    def _request(self, environ: dict[str, Any], route: Route, params: dict[str, str]) -> Request:
        """The request without its body: everything authorisation looks at."""
        qs = environ.get("QUERY_STRING", "")
        query = dict(parse_qsl(qs, keep_blank_values=True)) if qs else {}
        headers = {"authorization": environ.get("HTTP_AUTHORIZATION", ""), "range": environ.get("HTTP_RANGE", "")}
        client_cert = environ.get("SSL_CLIENT_VERIFY") == "SUCCESS"
        path = environ.get("PATH_INFO", "/")
        # The signature covers the request target exactly as the client sent it.
        target = environ.get("REQUEST_URI") or (path + ("?" + qs if qs else ""))
        return Request(environ["REQUEST_METHOD"], path, target, query, params, b"",
                       environ.get("REMOTE_ADDR", ""), headers, route, client_cert)

    def _content_length(self, environ: dict[str, Any], route: Route) -> int:
        if environ.get("HTTP_TRANSFER_ENCODING"):
            raise HTTPError(411, "send the body with a Content-Length, not a transfer coding")
        try:
            size = int(environ.get("CONTENT_LENGTH") or "0")
        except ValueError:
            raise HTTPError(400, "bad Content-Length") from None
        limit = route.max_body or self.max_body
        if size > limit:
            raise HTTPError(413, f"request body of {size} bytes exceeds the limit of {limit}")
        return size

    def _authorize(self, request: Request) -> _Grant:
        """Decide on the headers alone (never the body): 401/403, or how much body may be read."""
        route = request.route
        unsigned = _Grant(route.unsigned_body or UNSIGNED_BODY)
        if route.access == "public":
            return unsigned
        if self.trust_client_certs and request.client_cert:
            return _Grant(route.max_body or self.max_body)
        if route.access == "read" and self._from_read_network(request.remote):
            # The network grants the read; a good signature only lifts the unsigned body cap.
            return self._try_signed(request) or unsigned
        return self._signed(request)

    def _try_signed(self, request: Request) -> _Grant | None:
        if not request.headers["authorization"] or self.verifier is None:
            return None
        try:
            return self._signed(request)
        except HTTPError:
            return None

    def _signed(self, request: Request) -> _Grant:
        return _Grant(request.route.max_body or self.max_body, self._check(request))

    def _check(self, request: Request) -> str:
        if self.verifier is None:
            raise HTTPError(403, "this node has no pool secret configured; signed requests are impossible")
        try:
            return self.verifier.check(request.method, request.target, request.headers["authorization"],
                                       self.receivers)
        except AuthError as exc:
            raise HTTPError(401, f"authentication failed: {exc}") from None

    def _read_body(self, environ: dict[str, Any], size: int, grant: _Grant) -> bytes:
        if size > grant.limit:
            raise HTTPError(413, f"request body of {size} bytes exceeds the limit of {grant.limit} for "
                                 f"{'a signed' if grant.signed_hash else 'an unsigned'} request")
        environ["htda.body_read"] = True
        data = environ["wsgi.input"].read(size) if size > 0 else b""
        if len(data) != size:
            raise HTTPError(400, "request body shorter than its Content-Length")
        if grant.signed_hash is not None:
            try:
                check_body(grant.signed_hash, data)
            except AuthError as exc:
                raise HTTPError(401, f"authentication failed: {exc}") from None
        return data

    def _from_read_network(self, remote: str) -> bool:
        if not self.read_networks or not remote:
            return False
        try:
            addr = ipaddress.ip_address(remote)
        except ValueError:
            return False
        return any(addr in net for net in self.read_networks)

    # -- OpenAPI -----------------------------------------------------------
    def openapi(self, title: str, version: str) -> dict[str, Any]:
        from .openapi import document

        return document(self.routes, title, version)


def _body_left_unread(environ: dict[str, Any], request: Request | None) -> bool:
    if environ.get("HTTP_TRANSFER_ENCODING"):
        return True
    try:
        size = int(environ.get("CONTENT_LENGTH") or "0")
    except ValueError:
        return True
    return size > 0 and not environ.get("htda.body_read")


def _dumps(value: Any) -> bytes:
    """An answer as JSON: a typed answer (a :mod:`htda.protocol` struct) or plain JSON values."""
    if isinstance(value, msgspec.Struct):
        return encode(value)  # fields left unset are left out
    return json.dumps(value, separators=(",", ":"), allow_nan=False).encode()


#: the largest piece of an answer handed to the server at once: cheroot's socket writer copies all it still
#: holds after every partial send, so a range of megabytes handed whole cost the serving node its CPU many
#: times over (a cache node serving peer copies: most of its CPU)
_PIECE = 256 << 10


def _pieces(body: bytes) -> Iterator[bytes]:
    """``body`` in pieces of at most :data:`_PIECE` bytes."""
    view = memoryview(body)
    for start in range(0, len(body), _PIECE):
        yield bytes(view[start:start + _PIECE])


def _error(status: int, message: str, details: dict[str, Any] | None = None) -> Response:
    payload = {"error": {"status": status, "message": message, **(details or {})}}
    return Response(_dumps(payload), status=status)


class _Server(GatedServerMixin, wsgi.Server):
    """cheroot's WSGI server behind a gate (see :mod:`htda.node.gate`)."""


class _Gateway(wsgi.Gateway_10):
    """cheroot's WSGI 1.0 gateway; an answer with ``Connection: close`` really closes.

    cheroot otherwise keeps the connection and reads ("drains") any body
    the application left unread, all of it and into memory, to reach the
    next request.
    """

    def start_response(self, status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
        if any(k.lower() == "connection" and v.lower() == "close" for k, v in headers):
            self.req.close_connection = True
        return super().start_response(status, headers, exc_info)  # the WSGI write callable


class RestServer:
    """cheroot serving a :class:`RestApp` on one address, optionally with TLS.

    Connections wait in a gate until their request has arrived (``gate``
    bounds the wait); with ``tls.verify_clients``, only certificates on
    ``tls.allowed_clients`` get past the handshake.
    """

    def __init__(self, app: RestApp, host: str, port: int, threads: int = 16, tls: dict[str, Any] | None = None,
                 gate: GateOptions | None = None):
        self.app, self.host = app, host
        self._server = _Server((host, port), app, numthreads=threads, request_queue_size=128,
                               timeout=30, shutdown_timeout=2, server_name="htda")
        self._server.gateway = _Gateway
        self._server.gate_options = gate or GateOptions()
        self._server.max_request_header_size = self._server.gate_options.max_header
        if tls and tls.get("enabled"):
            self._server.ssl_adapter = _ssl_adapter(tls)
            if tls.get("verify_clients"):
                self._server.gate_admit = _admit(CertificatePolicy(tls.get("allowed_clients") or ()))
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        port: int = self._server.bind_addr[1]
        return port

    @property
    def dropped(self) -> int:
        """Connections the gate dropped: silent or slow past the deadline, over the bound, refused certificates."""
        return self._server.gate.dropped if self._server.gate else 0

    def start(self) -> None:
        self._server.prepare()  # binds now, so a busy port fails start-up loudly
        self.app.add_receivers(receiver_names(self.host, self.port))
        self._thread = threading.Thread(target=self._server.serve, name="htda-rest", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._server.stop()
        if self._thread:
            self._thread.join(timeout=5)


def receiver_names(host: str, port: int) -> set[str]:
    """The names a server listening on ``host:port`` answers to, as signatures name receivers.

    A wildcard address answers on every interface: loopback and the host's
    own names (other addresses are aliases to configure).  A loopback
    address also answers to ``localhost``.
    """
    host = host.strip("[]")
    if host in ("", "0.0.0.0", "::"):
        hosts = {"127.0.0.1", "::1", "localhost", socket.gethostname(), socket.getfqdn()}
    elif host.lower() == "localhost":
        hosts = {"localhost", "127.0.0.1", "::1"}
    else:
        hosts = {host, "localhost"} if _is_loopback(host) else {host}
    return {host_port(h, port) for h in hosts}


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _admit(policy: CertificatePolicy) -> Callable[[dict[str, Any] | None, Any], bool]:
    def admit(cert: dict[str, Any] | None, addr: Any) -> bool:
        if policy.allows(cert):
            return True
        log.warning("refused a client certificate from %s: %s is not in tls.allowed_clients",
                    addr[0] if isinstance(addr, tuple) else addr, describe_certificate(cert))
        return False

    return admit


def _ssl_adapter(tls: dict[str, Any]) -> BuiltinSSLAdapter:
    adapter = BuiltinSSLAdapter(tls["certificate"], tls["private_key"], tls.get("ca_file") or None)
    adapter.context.minimum_version = ssl.TLSVersion.TLSv1_2
    if tls.get("verify_clients"):
        adapter.context.load_verify_locations(cafile=tls["ca_file"])
        adapter.context.verify_mode = ssl.CERT_REQUIRED
    return adapter

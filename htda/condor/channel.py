"""The submit agent's channel to the hooks: HTTP/1.1 on a UNIX socket, caller identified by the kernel.

Hooks run as the job's owner.  A TCP port on loopback can be bound by any
local user while the agent is down (boot, restart, crash), and whoever
answers a translate hook chooses what the job runs.  So the agent listens on
a UNIX socket in a directory that only root or the agent's account can write
(``/run/htda``): nobody else can create the socket, each hook checks who
serves it (:func:`htda.condor.hooks.connect_agent`), and the agent learns
each caller's uid from the socket (``SO_PEERCRED``), not from anything the
caller sends.

The server is cheroot (as the node's REST server, :mod:`htda.node.rest`),
bound to the socket path, its connections waiting in the node's
:class:`~htda.node.gate.Gate` until their request has arrived, so users who
connect and send nothing hold no worker.
"""

from __future__ import annotations

import logging
import os
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qsl

from cheroot import wsgi

from ..node.config import ConfigError
from ..node.gate import GatedServerMixin, GateOptions

__all__ = ["HookServer", "Call", "Answer", "Refused"]

log = logging.getLogger("htda.submit")

_REASONS = {200: "OK", 400: "Bad Request", 403: "Forbidden", 404: "Not Found", 405: "Method Not Allowed",
            411: "Length Required", 500: "Internal Server Error"}


class Refused(Exception):
    """The caller may not make this call (answered 403)."""


@dataclass(frozen=True)
class Call:
    """A hook's request: who sent it (uid from the socket), its query and its body."""

    uid: int
    query: dict[str, str]
    body: bytes


@dataclass
class Answer:
    """What a handler answers; ``status`` 400 or 403 for a refused call."""

    body: bytes
    status: int = 200
    headers: list[tuple[str, str]] = field(default_factory=list)


Handler = Callable[[Call], Answer]


class _Server(GatedServerMixin, wsgi.Server):
    """cheroot's WSGI server behind the node's gate."""


class HookServer:
    """Serves ``handlers`` (path -> handler, POST only) on the UNIX socket ``path``, mode 0666.

    The socket's directory must exist and be writable by nobody but its
    owner (the hooks refuse anything else); bodies over ``max_body`` are
    refused by cheroot before they are read.
    """

    def __init__(self, path: Path, handlers: dict[str, Handler], max_body: int, threads: int = 8,
                 gate: GateOptions | None = None):
        self.path, self.handlers = Path(path), handlers
        _check_directory(self.path.parent)  # now, before the node starts anything it would have to stop
        self._server = _Server(str(self.path), self, numthreads=threads, request_queue_size=128, timeout=10,
                               shutdown_timeout=2, server_name="htda-submit", peercreds_enabled=True)
        self._server.gate_options = gate or GateOptions(header_timeout=2.0)
        self._server.max_request_header_size = 16 * 1024
        self._server.max_request_body_size = max_body
        self._thread: threading.Thread | None = None
        self._inode: int | None = None

    def start(self) -> None:
        self._server.prepare()  # cheroot replaces a stale socket file and binds
        os.chmod(self.path, 0o666)  # every job owner's hook may connect; the umask may say otherwise
        self._inode = os.lstat(self.path).st_ino
        self._thread = threading.Thread(target=self._server.serve, name="htda-submit-hooks", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._server.stop()
        if self._thread:
            self._thread.join(timeout=5)
        try:
            if os.lstat(self.path).st_ino == self._inode:  # ours still: another agent may have taken the path
                os.unlink(self.path)
        except OSError:
            pass

    # -- WSGI ----------------------------------------------------------------------------------------
    def __call__(self, environ: dict, start_response: Callable) -> list[bytes]:
        try:
            answer = self._answer(environ)
        except Refused as exc:
            answer = Answer(f"{exc}\n".encode(), 403)
        except Exception:  # noqa: BLE001 - a bug becomes a logged 500; the hook fails open
            log.exception("hook request %s failed", environ.get("PATH_INFO"))
            answer = Answer(b"internal error (see the agent's log)\n", 500)
        headers = [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(answer.body))),
                   *answer.headers]
        start_response(f"{answer.status} {_REASONS.get(answer.status, 'Status')}", headers)
        return [answer.body]

    def _answer(self, environ: dict) -> Answer:
        handler = self.handlers.get(environ.get("PATH_INFO", ""))
        if handler is None:
            return Answer(b"no such endpoint\n", 404)
        if environ.get("REQUEST_METHOD") != "POST":
            return Answer(b"POST only\n", 405, [("Allow", "POST")])
        if environ.get("HTTP_TRANSFER_ENCODING"):
            return Answer(b"send the body with a Content-Length\n", 411)
        uid = environ.get("X_REMOTE_UID")
        if not uid or not uid.isdigit():
            raise Refused("the caller's uid is unknown (SO_PEERCRED)")
        size = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(size) if size > 0 else b""
        query = dict(parse_qsl(environ.get("QUERY_STRING", ""), keep_blank_values=True))
        return handler(Call(int(uid), query, body))


def _check_directory(directory: Path) -> None:
    """The socket's directory exists and only its owner may write it (else every hook refuses it)."""
    try:
        st = os.lstat(directory)
    except OSError as exc:
        raise ConfigError(f"submit.socket: its directory {directory} cannot be used: {exc.strerror}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise ConfigError(f"submit.socket: {directory} is not a directory")
    if st.st_mode & 0o022:
        raise ConfigError(f"submit.socket: {directory} is writable by group or others (mode "
                          f"{stat.S_IMODE(st.st_mode):o}); hooks refuse a socket there: make it 0755")


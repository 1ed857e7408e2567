"""Connections wait outside the worker threads until their request has arrived.

cheroot gives every accepted connection to a worker thread, which then
blocks reading the request line and headers (and, with TLS, the acceptor
itself blocks in the handshake).  A few dozen clients that connect and send
nothing, or send their headers a byte at a time, so hold every worker and
``/healthz`` stops answering.

:class:`Gate` replaces cheroot's connection manager.  One thread accepts,
completes TLS handshakes and reads each request's header block (and a small
body) with non-blocking sockets; only a connection whose request is complete
goes to a worker, with the bytes read so far replayed to cheroot's parser.
A connection waits at most ``header_timeout`` seconds for its request (an
idle keep-alive connection: ``idle_timeout`` for the first byte), at most
``max_pending`` connections wait (the oldest is dropped first), and a header
block larger than ``max_header`` is refused.  Closing connections linger in
the gate too: it half-closes, discards what the client still sends for a
moment so the client can read the answer, then closes, without a worker.
"""

from __future__ import annotations

import _pyio
import errno
import io
import logging
import resource
import selectors
import socket
import ssl
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from cheroot import server as cheroot_server
from cheroot.makefile import StreamReader, StreamWriter

__all__ = ["Gate", "GateOptions", "GatedServerMixin"]

log = logging.getLogger("htda.rest")

_READ_SIZE = 65536
_ACCEPTS_PER_WAKE = 64
_LINGER_SECONDS, _LINGER_BYTES = 2.0, 4 << 20
_TOO_LARGE = (b"HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Length: 0\r\n"
              b"Connection: close\r\n\r\n")


@dataclass(frozen=True)
class GateOptions:
    """Bounds of the waiting room."""

    header_timeout: float = 5.0  # seconds from the first byte until the request is complete
    idle_timeout: float = 30.0  # seconds a kept-alive connection may wait for its next request
    max_pending: int = 1024  # connections waiting at once; beyond, the oldest is dropped
    max_header: int = 64 * 1024  # bytes of request line and headers
    prefetch_body: int = 64 * 1024  # bodies up to this size are read here too, so no worker waits for them


_Mode = Literal["r", "w", "rw", "rb", "wb", "rwb"]  # the modes socket.SocketIO takes


class ReplayReader(StreamReader):
    """cheroot's socket reader, fed first with the bytes the gate already read."""

    def __init__(self, sock: socket.socket, mode: _Mode = "rb", bufsize: int = 8192):
        self._replay = _ReplaySocketIO(sock, mode)
        _pyio.BufferedReader.__init__(self, self._replay, bufsize)  # StreamReader's, on our raw
        self.bytes_read = 0

    def feed(self, data: bytes) -> None:
        self._replay.pending.extend(data)

    def unread(self) -> bytes:
        """Bytes received but not yet parsed: the reader's buffer, then what was fed."""
        # cheroot's stub derives StreamReader from io.BufferedReader; it is _pyio's, whose buffer this is
        buffered = bytes(self._read_buf[self._read_pos:])  # type: ignore[attr-defined]
        return buffered + bytes(self._replay.pending)


class _ReplaySocketIO(socket.SocketIO):
    """A socket's raw stream that returns fed bytes before reading the socket."""

    def __init__(self, sock: socket.socket, mode: _Mode):
        super().__init__(sock, mode)
        self.pending = bytearray()

    def readinto(self, buffer: Any) -> int | None:
        if self.pending:
            size = min(len(buffer), len(self.pending))
            buffer[:size] = self.pending[:size]
            del self.pending[:size]
            return size
        return super().readinto(buffer)


def _makefile(sock: socket.socket, mode: _Mode = "r", bufsize: int = 8192) -> StreamReader | StreamWriter:
    return ReplayReader(sock, mode, bufsize) if "r" in mode else StreamWriter(sock, mode, bufsize)


def request_ready(head: bytes, options: GateOptions) -> str:
    """``"ready"`` when ``head`` holds a whole header block (and its small body), ``"wait"``, or ``"large"``.

    The headers are parsed by cheroot's own reader, so the gate waits for
    exactly the body cheroot will read (whatever duplicate or folded
    Content-Length lines say); anything cheroot would refuse is ready at once.
    """
    end = _header_end(head)
    if end < 0:
        return "large" if len(head) > options.max_header else "wait"
    headers = _headers(head[:end])
    if headers is None:
        return "ready"  # cheroot answers 400
    try:
        length = int(headers.get(b"Content-Length", 0))
    except ValueError:
        length = 0  # cheroot answers 400
    small = 0 < length <= options.prefetch_body
    if not small or b"Transfer-Encoding" in headers or headers.get(b"Expect") == b"100-continue":
        return "ready"  # a large body is for the application to refuse or to read: it knows who is asking
    return "ready" if len(head) - end >= length else "wait"


def _headers(block: bytes) -> dict[bytes, bytes] | None:
    """The header block as cheroot reads it (one leading empty line skipped), or None where it would not."""
    stream = io.BytesIO(block)
    if stream.readline() == b"\r\n":
        stream.readline()
    try:
        headers: dict[bytes, bytes] = cheroot_server.HeaderReader()(stream, {})
    except ValueError:
        return None
    return headers


def _header_end(head: bytes) -> int:
    """Offset just past the empty line that ends the header block, or -1."""
    ends = [at + len(marker) for marker in (b"\r\n\r\n", b"\n\n") if (at := head.find(marker)) >= 0]
    return min(ends, default=-1)


@dataclass(eq=False)
class _Waiting:
    sock: socket.socket
    addr: Any
    deadline: float
    stage: str  # "handshake", "request" or "linger"
    conn: Any = None  # cheroot's HTTPConnection once it exists (kept-alive connections)
    data: bytearray = field(default_factory=bytearray)
    events: int = selectors.EVENT_READ
    discarded: int = 0  # bytes thrown away while lingering
    started: bool = False  # bytes of a request have arrived (a kept-alive connection is idle until then)


class Gate:
    """cheroot's ConnectionManager interface (``run``, ``stop``, ``put``, ``close``), served from one thread.

    ``tls`` is cheroot's SSL adapter (its context and WSGI environ); ``admit``
    decides on a verified client certificate after the handshake.
    """

    def __init__(self, server: Any, options: GateOptions, tls: Any = None,
                 admit: Callable[[dict[str, Any] | None, Any], bool] | None = None):
        self.server, self.options, self.tls, self.admit = server, options, tls, admit
        self.max_pending = min(options.max_pending, _fd_budget())
        self._selector = selectors.DefaultSelector()
        self._waiting: OrderedDict[int, _Waiting] = OrderedDict()
        # The gate thread and the workers (handing connections back) share the waiting room; the gate
        # thread does not hold the lock while it waits in select(), so a worker's hand-back is immediate.
        self._lock = threading.Lock()
        self._closed = False
        self._wake_r, self._wake_w = socket.socketpair()  # only stop() needs to interrupt select()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        server.socket.setblocking(False)
        self._selector.register(server.socket, selectors.EVENT_READ, server)
        self._stop_requested = False
        self._serving = False
        self._next_expiry = 0.0
        self.dropped = 0  # connections dropped for a deadline, the bound or a refused certificate

    # -- cheroot's ConnectionManager interface ---------------------------------------------------
    def run(self, expiration_interval: float) -> None:
        self._serving = True
        try:
            while not self._stop_requested:
                self._turn()
        finally:
            self._serving = False

    def stop(self) -> None:
        self._stop_requested = True
        _send_quietly(self._wake_w, b"\0")
        while self._serving:
            time.sleep(0.01)

    def put(self, conn: Any) -> None:
        """A worker is done with a kept-alive connection: wait here for its next request."""
        conn.last_used = time.time()
        unread = conn.rfile.unread()
        if request_ready(unread, self.options) == "ready":
            self.server.process_conn(conn)  # pipelined: the next request is already here
            return
        conn.socket.setblocking(False)
        deadline = time.monotonic() + (self.options.header_timeout if unread else self.options.idle_timeout)
        self._enter(_Waiting(conn.socket, (conn.remote_addr, conn.remote_port), deadline, "request", conn=conn,
                             started=bool(unread)))

    def linger(self, sock: socket.socket) -> bool:
        """Take over closing ``sock`` (see the module's docstring); False once the gate has stopped."""
        if not self._serving:
            return False
        try:
            sock.shutdown(socket.SHUT_WR)  # the answer goes out now, followed by our FIN
            sock.setblocking(False)
        except OSError:
            pass
        self._enter(_Waiting(sock, None, time.monotonic() + _LINGER_SECONDS, "linger"))
        return True

    def close(self) -> None:
        with self._lock:
            self._closed = True
            for entry in list(self._waiting.values()):
                self._drop(entry, count=False)
            self._selector.close()
        self._wake_r.close()
        self._wake_w.close()

    @property
    def can_add_keepalive_connection(self) -> bool:
        return len(self._waiting) < self.max_pending

    @property
    def _num_connections(self) -> int:
        return len(self._waiting)

    # -- the loop ------------------------------------------------------------------------------------
    def _turn(self) -> None:
        events = self._selector.select(timeout=0.1)
        with self._lock:
            for key, _ in events:
                if key.data is None:
                    while _recv(self._wake_r):
                        pass
                elif key.data is self.server:
                    self._accept()
                elif (entry := self._waiting.get(key.fd)) is not None and entry is key.data:  # not dropped meanwhile
                    self._step(entry)
            now = time.monotonic()
            if now >= self._next_expiry:
                self._next_expiry = now + 0.1
                self._expire(now)

    def _accept(self) -> None:
        for _ in range(_ACCEPTS_PER_WAKE):
            try:
                sock, addr = self.server.socket.accept()
            except BlockingIOError:
                return
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    self._drop_oldest()  # out of descriptors: the longest waiter makes room
                    if not self._waiting:
                        time.sleep(0.05)
                    return
                if exc.errno in (errno.ECONNABORTED, errno.EINTR, errno.EPROTO):
                    continue
                raise
            self._admit_new(sock, addr)

    def _admit_new(self, sock: socket.socket, addr: Any) -> None:
        stage = "request"
        try:
            sock.setblocking(False)
            if self.tls is not None:
                sock = self.tls.context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
                stage = "handshake"
        except OSError:  # reset before we even looked at it
            sock.close()
            return
        self._wait(_Waiting(sock, addr, time.monotonic() + self.options.header_timeout, stage))
        self._step(self._waiting[sock.fileno()])  # data may already be there

    def _step(self, entry: _Waiting) -> None:
        try:
            if entry.stage == "handshake":
                self._handshake(entry)
            elif entry.stage == "request":
                self._read_request(entry)
            else:
                self._discard(entry)
        except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError: a broken or rude peer
            log.debug("connection from %s dropped: %s", entry.addr, exc)
            self._drop(entry, count=False)

    def _handshake(self, entry: _Waiting) -> None:
        sock = entry.sock
        assert isinstance(sock, ssl.SSLSocket)  # wrapped by _admit_new, which set this stage
        try:
            sock.do_handshake()
        except ssl.SSLWantReadError:
            return self._listen(entry, selectors.EVENT_READ)
        except ssl.SSLWantWriteError:
            return self._listen(entry, selectors.EVENT_WRITE)
        if self.admit is not None and not self.admit(sock.getpeercert(), entry.addr):
            self._drop(entry)
            return None
        entry.stage = "request"
        self._listen(entry, selectors.EVENT_READ)
        return self._read_request(entry)

    def _read_request(self, entry: _Waiting) -> None:
        head = (entry.conn.rfile.unread() if entry.conn is not None else b"") + bytes(entry.data)
        while True:
            chunk = _recv(entry.sock)
            if chunk is None:
                break
            if not chunk:
                return self._drop(entry, count=False)  # the client went away
            if not head:  # the request starts: from now on it has header_timeout to arrive
                entry.deadline = min(entry.deadline, time.monotonic() + self.options.header_timeout)
            entry.started = True
            entry.data.extend(chunk)
            head += chunk
            drained = len(chunk) < _READ_SIZE and not _tls_pending(entry.sock)
            if drained or len(head) > self.options.max_header + self.options.prefetch_body:
                break  # anything more wakes select() again
        state = request_ready(head, self.options)
        if state == "ready":
            self._hand_off(entry)
        elif state == "large":
            _send_quietly(entry.sock, _TOO_LARGE)
            self._drop(entry)
        return None

    def _discard(self, entry: _Waiting) -> None:
        while True:
            chunk = _recv(entry.sock)
            if chunk is None:
                return
            entry.discarded += len(chunk)
            if not chunk or entry.discarded > _LINGER_BYTES:
                return self._drop(entry, count=False)

    # -- hand-off and bookkeeping ---------------------------------------------------------------------
    def _hand_off(self, entry: _Waiting) -> None:
        self._forget(entry)
        conn = entry.conn or self._connection(entry)
        conn.rfile.feed(bytes(entry.data))
        entry.sock.settimeout(self.server.timeout)
        self.server.process_conn(conn)

    def _connection(self, entry: _Waiting) -> Any:
        conn = self.server.ConnectionClass(self.server, entry.sock, _makefile)
        if isinstance(entry.addr, tuple):
            conn.remote_addr, conn.remote_port = entry.addr[0], entry.addr[1]
        conn.ssl_env = self.tls.get_environ(entry.sock) if self.tls is not None else {}
        return conn

    def _enter(self, entry: _Waiting) -> None:
        """A worker hands a connection back (to wait for its next request, or to linger)."""
        with self._lock:
            if self._closed:
                entry.sock.close()
            else:
                self._wait(entry)

    def _wait(self, entry: _Waiting) -> None:
        while len(self._waiting) >= self.max_pending:
            self._drop_oldest()
        self._waiting[entry.sock.fileno()] = entry
        self._selector.register(entry.sock, entry.events, entry)

    def _listen(self, entry: _Waiting, events: int) -> None:
        if entry.events != events:
            entry.events = events
            self._selector.modify(entry.sock, events, entry)

    def _expire(self, now: float) -> None:
        late = [entry for entry in self._waiting.values() if entry.deadline < now]
        for entry in late:
            idle = entry.stage == "linger" or (entry.conn is not None and not entry.started)
            self._drop(entry, count=not idle)  # only a request that did not arrive in time counts

    def _drop_oldest(self) -> None:
        if self._waiting:
            self._drop(next(iter(self._waiting.values())))

    def _forget(self, entry: _Waiting) -> None:
        fd = entry.sock.fileno()
        if self._waiting.get(fd) is entry:
            del self._waiting[fd]
            self._selector.unregister(entry.sock)

    def _drop(self, entry: _Waiting, count: bool = True) -> None:
        self._forget(entry)
        self.dropped += count
        try:
            entry.sock.close()
        except OSError:
            pass


def _recv(sock: socket.socket) -> bytes | None:
    """Whatever the socket has now; None when nothing (yet), b"" at end of stream."""
    try:
        return sock.recv(_READ_SIZE)
    except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
        return None


def _tls_pending(sock: socket.socket) -> int:
    """Decrypted bytes a TLS socket holds that select() cannot see."""
    return sock.pending() if isinstance(sock, ssl.SSLSocket) else 0


def _send_quietly(sock: socket.socket, data: bytes) -> None:
    try:
        sock.send(data)
    except OSError:
        pass


def _fd_budget() -> int:
    """Half the descriptors this process may open: the rest is for files, databases and workers."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return max(64, soft // 2) if soft != resource.RLIM_INFINITY else 1 << 20


if TYPE_CHECKING:
    _Server = cheroot_server.HTTPServer  # what the mixin is mixed into
else:
    _Server = object


class GatedServerMixin(_Server):
    """Mix into a cheroot server class: its connections then go through a :class:`Gate`."""

    gate_options = GateOptions()
    gate_admit: Callable[[dict[str, Any] | None, Any], bool] | None = None
    gate: Gate | None = None
    _connections: Any  # cheroot's connection manager (not in its stub), replaced by the gate

    def prepare(self) -> None:
        super().prepare()  # binds, listens, starts the workers and cheroot's own manager, replaced here
        self._connections._selector.close()
        self.gate = self._connections = Gate(self, self.gate_options, self.ssl_adapter, self.gate_admit)
        self.ConnectionClass = _lingering_connection_class(self)


def _lingering_connection_class(server: Any) -> type:
    class Connection(cheroot_server.HTTPConnection):
        """A connection whose close is left to the gate (see :meth:`Gate.linger`)."""

        def close(self) -> None:
            self.rfile.close()
            gate = server.gate
            if gate is None or self.linger or not gate.linger(self.socket):
                super().close()

    return Connection

"""Real storage servers for cache tests and benchmarks: an XRootD server and a threaded HTTP server with ranges;
trees of files to copy, and :func:`after_each_chunk` to act in the middle of a copy."""

from __future__ import annotations

import email.utils
import os
import pwd
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import numpy as np

from htda.cache.readthrough import ReadThroughProxy
from testkit.nodes import free_port, wait_until
from testkit.processes import ProcessExited, stop_process

__all__ = ["XRootDServer", "XCacheProxy", "RangeHTTPServer", "after_each_chunk", "copy_tree", "make_tree",
           "write_root_file"]


class XRootDServer:
    """``xrootd`` from Debian's package exporting ``root`` on a loopback port (runs as user xrootd)."""

    def __init__(self, root: Path, workdir: Path):
        self.root, self.workdir = root, workdir
        self.port = 0
        self.url = ""
        self.proc: subprocess.Popen | None = None

    def start(self, attempts: int = 3) -> "XRootDServer":
        """Start it on a free port; again on another when it exits at once (the port taken before xrootd
        bound it, or whatever else made it stop: each attempt's log is in the error)."""
        user = pwd.getpwnam("xrootd")
        for path in (self.root, self.workdir):
            path.mkdir(parents=True, exist_ok=True)
            os.chmod(path, 0o755)
        subprocess.run(["chown", "-R", f"{user.pw_uid}", str(self.root), str(self.workdir)], check=True)
        failures = []
        for _ in range(attempts):
            try:
                return self._start_on(free_port())
            except ProcessExited as exc:
                failures.append(str(exc))
        raise ProcessExited(f"xrootd did not start in {attempts} attempts:\n" + "\n---\n".join(failures))

    def _start_on(self, port: int) -> "XRootDServer":
        self.port, self.url = port, f"root://127.0.0.1:{port}/"
        conf = self.workdir / "xrootd.cfg"
        conf.write_text(self.config(port))
        log = self.workdir / "xrootd.log"
        with open(self.workdir / "xrootd.out", "ab") as out:  # what it prints before its log is open
            self.proc = subprocess.Popen(["xrootd", "-R", "xrootd", "-c", str(conf), "-l", str(log), "-n",
                                          "htdatest"], stdout=out, stderr=subprocess.STDOUT, cwd=self.workdir)
        wait_until(self._listening, timeout=15, what=f"xrootd on port {port} (log in {self.workdir})")
        return self

    def config(self, port: int) -> str:
        return (f"all.export /\nxrd.port {port}\noss.localroot {self.root}\nxrootd.chksum adler32\n"
                f"all.adminpath {self.workdir}\nall.pidpath {self.workdir}\n")

    def _listening(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise ProcessExited(f"xrootd exited with {self.proc.returncode}: {_tail(self.workdir)}")
        # Its own word, not a connect: a connect succeeds on whatever else may listen on that port.
        return f":{self.port} initialization completed" in _tail(self.workdir)

    def stop(self) -> None:
        stop_process(self.proc, timeout=5)


class XCacheProxy(XRootDServer):
    """A read-through XRootD proxy file cache (pfc) in front of ``origin``, its blocks under ``root``: the
    worker-side cache of docs/cache.rst, *Read-through storage on each worker*."""

    def __init__(self, root: Path, workdir: Path, origin: XRootDServer):
        super().__init__(root, workdir)
        self.origin = origin

    def config(self, port: int) -> str:
        return ReadThroughProxy(origin=f"127.0.0.1:{self.origin.port}", root=str(self.root), port=port,
                                adminpath=str(self.workdir)).render()

    def cached_bytes(self, lfn: str) -> int:
        """Bytes of ``lfn`` the proxy holds on its disk (its data file is sparse until every block came)."""
        path = self.root / lfn.lstrip("/")
        return path.stat().st_blocks * 512 if path.exists() else 0


def _tail(workdir: Path) -> str:
    """The end of the newest log and of what xrootd printed to its output."""
    logs = sorted(workdir.rglob("xrootd.log*"), key=lambda path: path.stat().st_mtime)
    parts = [logs[-1].read_text()[-2000:] if logs else "(no log)"]
    out = workdir / "xrootd.out"
    if out.exists():
        parts.append("output: " + (out.read_text()[-1000:] or "(none)"))
    return "\n".join(parts)


class _Handler(BaseHTTPRequestHandler):
    server: "RangeHTTPServer"
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:  # quiet tests
        pass

    def _file(self) -> Path | None:
        rel = unquote(self.path.split("?", 1)[0]).lstrip("/")
        path = (self.server.root / rel).resolve()
        if not str(path).startswith(str(self.server.root.resolve()) + "/") or not path.is_file():
            return None
        return path

    def _head(self, path: Path, status: int, length: int, extra: dict[str, str]) -> None:
        st = path.stat()
        self.send_response(status)
        self.send_header("Content-Length", str(length))
        self.send_header("Last-Modified", email.utils.formatdate(st.st_mtime, usegmt=True))
        self.send_header("Accept-Ranges", "bytes")
        for key, value in extra.items():
            self.send_header(key, value)
        self.end_headers()

    def do_HEAD(self) -> None:
        path = self._file()
        if path is None:
            self.send_error(404)
            return
        self._head(path, 200, path.stat().st_size, {})

    def do_GET(self) -> None:
        path = self._file()
        if path is None:
            self.send_error(404)
            return
        size = path.stat().st_size
        start, status, extra = 0, 200, {}
        rng = self.headers.get("Range")
        if rng and rng.startswith("bytes=") and rng.endswith("-"):
            start = int(rng[6:-1])
            status, extra = 206, {"Content-Range": f"bytes {start}-{size - 1}/{size}"}
        self._head(path, status, size - start, extra)
        with open(path, "rb") as fh:
            fh.seek(start)
            sent = 0
            while True:
                chunk = fh.read(64 * 1024)
                if not chunk:
                    return
                if self.server.cut_after is not None and start + sent + len(chunk) > self.server.cut_after:
                    self.server.cut_after = None  # cut this one transfer, serve the next in full
                    self.wfile.write(chunk[: max(0, self.server.cut_after_bytes(start + sent))])
                    self.wfile.flush()
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                self.wfile.write(chunk)
                sent += len(chunk)
                if self.server.delay:
                    time.sleep(self.server.delay)


class RangeHTTPServer(ThreadingHTTPServer):
    """Serves ``root`` with HEAD, Last-Modified and ``Range: bytes=N-``.

    ``delay`` slows every 64 KiB chunk (a slow link); ``cut_after`` drops the
    connection once a transfer passes that byte offset (a flaky link).
    """

    daemon_threads = True

    def __init__(self, root: Path):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.root = root
        self.url = f"http://127.0.0.1:{self.server_address[1]}"
        self.delay = 0.0
        self.cut_after: int | None = None
        self._cut_at = 0
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)

    def cut_after_bytes(self, position: int) -> int:
        return self._cut_at - position

    def cut_once_at(self, offset: int) -> None:
        self._cut_at = offset
        self.cut_after = offset

    def start(self) -> "RangeHTTPServer":
        self._thread.start()
        return self

    def use_tls(self, certificate: str, private_key: str) -> None:
        """Serve HTTPS instead (call before :meth:`start`)."""
        import ssl

        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(certificate, private_key)
        self.socket = context.wrap_socket(self.socket, server_side=True)
        self.url = self.url.replace("http://", "https://")

    def stop(self) -> None:
        self.shutdown()
        self.server_close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hangs up mid-transfer (a copy cancelled, a node stopped) is what storage sees every
        day: not worth a traceback on the test output; anything else still is."""
        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)


def copy_tree(src: Path, dst: Path) -> None:
    shutil.copytree(src, dst, dirs_exist_ok=True, copy_function=shutil.copy2)


def write_root_file(path: Path, entries: int = 200, seed: int = 1) -> None:
    """A small ROOT file with one TTree of numpy arrays, written by uproot."""
    import uproot

    rng = np.random.default_rng(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    with uproot.recreate(path) as fh:
        fh["events"] = {"pt": rng.exponential(20.0, entries), "n": rng.integers(0, 10, entries).astype(np.int32)}


def make_tree(root: Path, sizes: dict[str, int], seed: int = 7) -> dict[str, bytes]:
    """Files of random bytes under ``root``; returns LFN -> content."""
    rng = np.random.default_rng(seed)
    out = {}
    for lfn, size in sizes.items():
        path = root / lfn.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        data = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
        path.write_bytes(data)
        out[lfn] = data
    return out


def after_each_chunk(source: Any, action: Callable[[], object]) -> Any:
    """Make ``source`` (a storage backend or a :class:`~htda.cache.peers.PeerSource`) call ``action()`` after
    each chunk it gives a copy, once the stager has taken it: the tests' way to change a source, fill a
    device or cancel a copy in the middle of it.  Wraps this instance's ``read`` (its sink) and, where it has
    one, ``copy_to_fd`` (its ``copied`` callback); returns ``source``."""
    read = source.read

    def read_then_act(lfn, sink, *args, **kwargs):
        def chunk(data):
            sink(data)
            action()
        return read(lfn, chunk, *args, **kwargs)

    source.read = read_then_act
    copy = getattr(source, "copy_to_fd", None)
    if copy is not None:
        def copy_then_act(lfn, out_fd, copied, *args, **kwargs):
            def part(position, length):
                copied(position, length)
                action()
            return copy(lfn, out_fd, part, *args, **kwargs)

        source.copy_to_fd = copy_then_act
    return source

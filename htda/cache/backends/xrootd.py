"""XRootD storage through the client tools of Debian's ``xrootd-client`` (``xrdfs``, ``xrdcp``).

The Python bindings are not packaged here, so the tools run as subprocesses
with bounded time: ``XRD_CONNECTIONRETRY``, ``XRD_REQUESTTIMEOUT`` and
``XRD_STREAMTIMEOUT`` keep a dead server from hanging a copy for minutes, and
a watchdog kills a transfer that delivers nothing for ``stall_timeout``.

A copy resumes where an interrupted one stopped: ``xrdcp`` always starts at
byte 0, but ``xrdfs tail -c N`` streams a file's last N bytes (in bounded
memory, as a read from offset size - N), so a read from an offset asks for
the rest of the file as it is now.  If the file changed between the copy's
start and the resumed read, the stager's version check after the copy (and
the checksum and content checks) reject the copy, as for any changed source.
"""

from __future__ import annotations

import calendar
import os
import re
import select
import subprocess
import time
from typing import Any

from ...lfn import normalize_lfn
from .base import FileStat, Sink, StorageBackend, StorageError

__all__ = ["XRootDStorage"]

_NOT_FOUND = re.compile(r"\[3011\]|no such file", re.I)


class XRootDStorage(StorageBackend):
    """Files behind ``root://host:port//prefix``.

    Options: ``timeout`` (seconds per request, default 10), ``stall_timeout``
    (seconds without data before a copy is abandoned, default 30).
    """

    name = "xrootd"
    supports_ranges = True

    def __init__(self, location: str, options: dict[str, Any] | None = None):
        super().__init__(location, options)
        m = re.fullmatch(r"(root|xroot)s?://([^/]+)/(/.*)?", location)
        if not m:
            raise ValueError(f"xrootd location must look like root://host:port//path, not {location!r}")
        self.server = m.group(2)
        self.prefix = (m.group(3) or "/").rstrip("/")
        self.timeout = float(self.options.get("timeout", 10.0))
        self.stall_timeout = float(self.options.get("stall_timeout", 30.0))
        t = str(max(1, int(self.timeout)))
        self.env = {**os.environ, "XRD_CONNECTIONRETRY": "1", "XRD_REQUESTTIMEOUT": t,
                    "XRD_STREAMTIMEOUT": t, "XRD_CONNECTIONWINDOW": t}

    def path(self, lfn: str) -> str:
        return self.prefix + normalize_lfn(lfn)

    def url(self, lfn: str) -> str:
        return f"root://{self.server}/{self.path(lfn)}"

    def _xrdfs(self, *args: str) -> str:
        try:
            done = subprocess.run(["xrdfs", self.server, *args], capture_output=True, text=True,
                                  timeout=self.timeout * 2 + 5, env=self.env)
        except subprocess.TimeoutExpired:
            raise StorageError(f"xrdfs {args[0]} on {self.server} timed out") from None
        if done.returncode != 0:
            message = (done.stderr or done.stdout).strip()
            if _NOT_FOUND.search(message):
                raise FileNotFoundError(2, "no such file on the xrootd server", args[-1])
            raise StorageError(f"xrdfs {args[0]} {args[-1]}: {message or 'exit ' + str(done.returncode)}")
        return done.stdout

    def stat(self, lfn: str) -> FileStat:
        out = self._xrdfs("stat", self.path(lfn))
        fields = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
        try:
            size = int(fields["Size"].strip())
            mtime = calendar.timegm(time.strptime(fields["MTime"].strip(), "%Y-%m-%d %H:%M:%S"))
        except (KeyError, ValueError):
            raise StorageError(f"xrdfs stat {lfn}: unexpected answer {out!r}", transient=False) from None
        if "IsDir" in fields.get("Flags", ""):
            raise StorageError(f"{lfn}: is a directory on the xrootd server", transient=False)
        return FileStat(size, float(mtime))

    def checksum(self, lfn: str, kind: str) -> str | None:
        try:
            out = self._xrdfs("query", "checksum", self.path(lfn))
        except (StorageError, FileNotFoundError):
            return None
        name, _, value = out.strip().partition(" ")
        return value.strip().lower() if name == kind and value else None

    def read(self, lfn: str, sink: Sink, offset: int = 0, buffer_size: int = 8 << 20) -> int:
        if offset < 0:
            raise ValueError("offset must be >= 0")
        if offset == 0:
            command = ["xrdcp", "--silent", "--nopbar", self.url(lfn), "-"]
        else:
            rest = self.stat(lfn).size - offset
            if rest < 0:
                raise StorageError(f"{lfn}: shorter than the offset {offset} to resume at", transient=False)
            if rest == 0:
                return 0
            command = ["xrdfs", self.server, "tail", "-c", str(rest), self.path(lfn)]
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=self.env, bufsize=0)
        stdout, stderr = proc.stdout, proc.stderr
        assert stdout is not None and stderr is not None  # both are pipes
        try:
            total = self._pump(stdout.fileno(), sink, buffer_size)
            err = stderr.read().decode(errors="replace").strip()
            if proc.wait(timeout=self.timeout) != 0:
                if _NOT_FOUND.search(err):
                    raise FileNotFoundError(2, "no such file on the xrootd server", lfn)
                raise StorageError(f"{command[0]} {lfn}: {err or 'exit ' + str(proc.returncode)}")
            return total
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            stdout.close()
            stderr.close()

    def _pump(self, fd: int, sink: Sink, buffer_size: int) -> int:
        """Copy what the pipe ``fd`` delivers to ``sink`` until it ends; the bytes copied."""
        buf = bytearray(min(buffer_size, 1 << 20))
        view = memoryview(buf)
        total = 0
        while True:
            ready, _, _ = select.select([fd], [], [], self.stall_timeout)
            if not ready:
                raise StorageError(f"the transfer delivered nothing for {self.stall_timeout:g}s")
            n = os.readv(fd, [buf])
            if n == 0:
                return total
            sink(view[:n])
            total += n

"""HTTP(S) storage through PycURL: HEAD for size and mtime, ranged GETs so copies resume."""

from __future__ import annotations

import io
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import quote

import pycurl

from ...lfn import normalize_lfn
from .base import FileStat, Sink, StorageBackend, StorageError

__all__ = ["HTTPStorage"]


class HTTPStorage(StorageBackend):
    """Files under a base URL (``https://host/prefix``); ``Last-Modified`` is the mtime.

    Options: ``connect_timeout`` (default 5 s), ``timeout`` (HEAD, default
    30 s), ``low_speed_time`` (a GET slower than 1 KiB/s for this long is
    abandoned, default 30 s), ``ca_file``, ``verify`` (default true).
    """

    name = "http"
    supports_ranges = True

    def __init__(self, location: str, options: dict[str, Any] | None = None):
        super().__init__(location, options)
        if not location.startswith(("http://", "https://")):
            raise ValueError(f"http location must be an http:// or https:// URL, not {location!r}")
        self.base = location.rstrip("/")

    def url(self, lfn: str) -> str:
        return self.base + quote(normalize_lfn(lfn))

    def _curl(self, url: str) -> pycurl.Curl:
        c = pycurl.Curl()
        c.setopt(pycurl.URL, url)
        c.setopt(pycurl.NOSIGNAL, 1)
        c.setopt(pycurl.PATH_AS_IS, 1)
        c.setopt(pycurl.CONNECTTIMEOUT_MS, int(float(self.options.get("connect_timeout", 5.0)) * 1000))
        if self.options.get("ca_file"):
            c.setopt(pycurl.CAINFO, self.options["ca_file"])
        if not self.options.get("verify", True):
            c.setopt(pycurl.SSL_VERIFYPEER, 0)
            c.setopt(pycurl.SSL_VERIFYHOST, 0)
        return c

    def stat(self, lfn: str) -> FileStat:
        headers = io.BytesIO()
        c = self._curl(self.url(lfn))
        c.setopt(pycurl.NOBODY, 1)
        c.setopt(pycurl.HEADERFUNCTION, headers.write)
        c.setopt(pycurl.TIMEOUT_MS, int(float(self.options.get("timeout", 30.0)) * 1000))
        try:
            c.perform()
            status = c.getinfo(pycurl.RESPONSE_CODE)
        except pycurl.error as exc:
            raise StorageError(f"HEAD {lfn}: {exc.args[-1]}") from None
        finally:
            c.close()
        if status == 404:
            raise FileNotFoundError(2, "no such file on the HTTP server", lfn)
        if status != 200:
            raise StorageError(f"HEAD {lfn}: HTTP {status}", transient=status >= 500)
        fields = _headers(headers.getvalue())
        try:
            size = int(fields["content-length"])
            mtime = parsedate_to_datetime(fields["last-modified"]).timestamp()
        except (KeyError, ValueError, TypeError):
            raise StorageError(f"HEAD {lfn}: no usable Content-Length/Last-Modified", transient=False) from None
        return FileStat(size, mtime)

    def read(self, lfn: str, sink: Sink, offset: int = 0, buffer_size: int = 8 << 20) -> int:
        delivered = 0
        failure: list[BaseException] = []
        status_line = [0]

        def header(line: bytes) -> None:
            if line.startswith(b"HTTP/"):
                parts = line.split()
                status_line[0] = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0

        def write(data: bytes) -> int | None:
            nonlocal delivered
            if status_line[0] not in (200, 206):
                return None  # an error page: swallow it, the status is checked below
            try:
                sink(memoryview(data))
            except BaseException as exc:  # noqa: BLE001 - re-raised after curl has stopped
                failure.append(exc)
                return 0  # tells curl to abort the transfer
            delivered += len(data)
            return None

        c = self._curl(self.url(lfn))
        c.setopt(pycurl.WRITEFUNCTION, write)
        c.setopt(pycurl.HEADERFUNCTION, header)
        c.setopt(pycurl.BUFFERSIZE, min(buffer_size, 512 * 1024))
        c.setopt(pycurl.LOW_SPEED_LIMIT, 1024)
        c.setopt(pycurl.LOW_SPEED_TIME, int(self.options.get("low_speed_time", 30)))
        if offset:
            c.setopt(pycurl.RANGE, f"{offset}-")
        try:
            c.perform()
            status = c.getinfo(pycurl.RESPONSE_CODE)
        except pycurl.error as exc:
            if failure:
                raise failure[0] from None
            raise StorageError(f"GET {lfn} after {delivered} bytes: {exc.args[-1]}") from None
        finally:
            c.close()
        if status == 404:
            raise FileNotFoundError(2, "no such file on the HTTP server", lfn)
        if offset and status != 206:
            raise StorageError(f"GET {lfn}: server ignored the range (HTTP {status})", transient=False)
        if status not in (200, 206):
            raise StorageError(f"GET {lfn}: HTTP {status}", transient=status >= 500)
        return delivered


def _headers(raw: bytes) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in raw.decode("latin-1").splitlines():
        name, sep, value = line.partition(":")
        if sep:
            out[name.strip().lower()] = value.strip()
    return out

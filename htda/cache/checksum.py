"""Streaming checksums of copies: adler32 (the HEP habit), crc32, or none."""

from __future__ import annotations

import os
import zlib
from collections.abc import Callable

__all__ = ["Checksum", "KINDS", "new_checksum", "checksum_fd"]


class Checksum:
    """A running checksum fed chunk by chunk; ``hexdigest()`` is 8 lower-case hex digits."""

    def __init__(self, kind: str):
        if kind not in KINDS:
            raise ValueError(f"unknown checksum '{kind}' (known: {', '.join(KINDS)})")
        self.kind = kind
        self._fn, self.value = KINDS[kind]

    def update(self, data: bytes | memoryview) -> None:
        if self._fn is not None:
            self.value = self._fn(data, self.value)

    def hexdigest(self) -> str:
        return "" if self._fn is None else f"{self.value & 0xFFFFFFFF:08x}"


_Fn = Callable[[bytes | memoryview, int], int] | None
KINDS: dict[str, tuple[_Fn, int]] = {"adler32": (zlib.adler32, 1), "crc32": (zlib.crc32, 0), "none": (None, 0)}


def new_checksum(kind: str) -> Checksum:
    return Checksum(kind)


def checksum_fd(fd: int, kind: str, buffer_size: int = 8 << 20) -> str:
    """The checksum of an open file's whole content."""
    ck = Checksum(kind)
    buf = bytearray(buffer_size)
    view = memoryview(buf)
    offset = 0
    while True:
        n = os.preadv(fd, [buf], offset)
        if n == 0:
            return ck.hexdigest()
        ck.update(view[:n])
        offset += n

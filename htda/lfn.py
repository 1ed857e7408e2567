"""Logical file names (LFNs): the one place that decides what a valid LFN is.

An LFN is an absolute, '/'-separated path such as ``/store/data/run1/f.root``.
Storage and cache backends map it under their own root, so an LFN that could
climb out of a root is refused here, before any component sees it.
"""

from __future__ import annotations

__all__ = ["MAX_LFN_BYTES", "normalize_lfn", "lfn_parts"]

MAX_LFN_BYTES = 4096
MAX_SEGMENT_BYTES = 255


def normalize_lfn(value: str) -> str:
    """Return the canonical form of ``value`` (leading '/', no repeated '/').

    Raises :class:`ValueError` for anything that could escape a root or that
    no file system could hold: ``..`` or ``.`` segments, NUL or other control
    characters, backslashes, over-long names, empty names.
    """
    if not isinstance(value, str):
        raise ValueError("LFN must be a string")
    if not value or value.strip("/") == "":
        raise ValueError("LFN is empty")
    if len(value.encode("utf-8", "surrogatepass")) > MAX_LFN_BYTES:
        raise ValueError(f"LFN longer than {MAX_LFN_BYTES} bytes")
    if any(ord(ch) < 32 or ch == "\x7f" for ch in value):
        raise ValueError("LFN contains a control character")
    if "\\" in value:
        raise ValueError("LFN contains a backslash")
    parts = [p for p in value.split("/") if p]
    for part in parts:
        if part in (".", ".."):
            raise ValueError(f"LFN contains a '{part}' segment")
        if len(part.encode("utf-8", "surrogatepass")) > MAX_SEGMENT_BYTES:
            raise ValueError(f"LFN segment longer than {MAX_SEGMENT_BYTES} bytes")
    return "/" + "/".join(parts)


def lfn_parts(lfn: str) -> list[str]:
    """The segments of a valid LFN, for joining under a root."""
    return normalize_lfn(lfn).strip("/").split("/")

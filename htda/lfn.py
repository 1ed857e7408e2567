"""Logical file names (LFNs): the one place that decides what a valid LFN is.

An LFN is an absolute, '/'-separated path such as ``/store/data/run1/f.root``.
Storage and cache backends map it under their own root, so an LFN that could
climb out of a root is refused here, before any component sees it.
"""

from __future__ import annotations

import re

__all__ = ["MAX_LFN_BYTES", "normalize_lfn", "lfn_parts"]

MAX_LFN_BYTES = 4096
MAX_SEGMENT_BYTES = 255
# A segment of this many characters or fewer is within MAX_SEGMENT_BYTES whatever they are (4 UTF-8 bytes at most).
_SHORT_SEGMENT = MAX_SEGMENT_BYTES // 4
_CONTROL = re.compile("[\x00-\x1f\x7f]")


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
    # The checks scan in C (a bulk job submission normalises millions of LFNs); the loop below only names the
    # segment at fault.
    if _CONTROL.search(value):
        raise ValueError("LFN contains a control character")
    if "\\" in value:
        raise ValueError("LFN contains a backslash")
    parts = [p for p in value.split("/") if p]
    if "." in parts or ".." in parts or max(map(len, parts)) > _SHORT_SEGMENT:
        _check_segments(parts)
    return "/" + "/".join(parts)


def _check_segments(parts: list[str]) -> None:
    for part in parts:
        if part in (".", ".."):
            raise ValueError(f"LFN contains a '{part}' segment")
        if len(part.encode("utf-8", "surrogatepass")) > MAX_SEGMENT_BYTES:
            raise ValueError(f"LFN segment longer than {MAX_SEGMENT_BYTES} bytes")


def lfn_parts(lfn: str) -> list[str]:
    """The segments of a valid LFN, for joining under a root."""
    return normalize_lfn(lfn).strip("/").split("/")

"""Byte counts as people write them: ``500G``, ``1.5TiB``, ``512m``, ``123456``."""

from __future__ import annotations

__all__ = ["MAX_BYTES", "parse_bytes"]

#: the most bytes a count may hold: every count is stored and replayed as a signed 64-bit integer (SQLite's, the
#: simulator's), and 8 EiB is past any storage
MAX_BYTES = (1 << 63) - 1

# decimal (K, M, G: powers of 1000) and binary (Ki, Mi, Gi: powers of 1024) prefixes, upper-cased
_UNITS = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15,
          "KI": 2**10, "MI": 2**20, "GI": 2**30, "TI": 2**40, "PI": 2**50}


def parse_bytes(text: str, what: str = "size") -> int:
    """``"500G"`` (decimal), ``"1.5TiB"`` (binary), ``"123456"`` bytes; a trailing B is optional, case does not
    matter.  A ValueError names ``what`` and the text otherwise (negative counts included)."""
    value = text.strip().upper().removesuffix("B")
    number = value.rstrip("KMGTPI")
    try:
        unit = _UNITS[value[len(number):]]
        count = int(number) * unit if number.isdigit() else float(number) * unit  # (exact where it is whole)
    except (KeyError, ValueError):
        raise ValueError(f"{what} {text!r} is not a size (e.g. 500G, 1.5TiB, 123456)") from None
    if not 0 <= count <= MAX_BYTES:
        raise ValueError(f"{what} {text!r} must be a number of bytes from 0 to {MAX_BYTES:,} (8 EiB)")
    return int(count)

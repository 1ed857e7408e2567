"""Byte counts and durations as people write them: ``500G``, ``1.5TiB``, ``512m``, ``123456``; ``90s``, ``5m``,
``30d``."""

from __future__ import annotations

__all__ = ["MAX_BYTES", "duration_text", "parse_bytes", "parse_duration"]

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


# seconds per unit of a duration as the command line writes it (``15m``, ``6h``, ``2d``, ``1w``)
_DURATIONS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_duration(text: str, what: str = "duration") -> float:
    """``"300"``, ``"90s"``, ``"15m"``, ``"6h"``, ``"2d"``, ``"1w"`` -> seconds (> 0).  A ValueError names ``what``
    and the text otherwise."""
    value = text.strip().lower()
    unit = _DURATIONS.get(value[-1:], None)
    try:
        seconds = float(value[:-1]) * unit if unit else float(value)
    except ValueError:
        raise ValueError(f"{what} {text!r} is not a duration (e.g. 300, 15m, 6h, 2d)") from None
    if not seconds > 0:
        raise ValueError(f"{what} {text!r} must be > 0")
    return seconds


def duration_text(seconds: float) -> str:
    """``5m``, ``30d``, ``90s``: a duration in its largest whole unit (not weeks: a label reads 7d), as
    :func:`parse_duration` reads it back."""
    for unit in "dhm":
        length = _DURATIONS[unit]
        if seconds >= length and seconds % length == 0:
            return f"{int(seconds // length)}{unit}"
    return f"{seconds:g}s"

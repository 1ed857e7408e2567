"""How a CSV trace's rows are laid out: which field is the timestamp, the object, its size and its group.

By default ``timestamp,object_id,size_bytes[,group_id]``; a header row may name the columns in another order and
leave out all but ``object_id``; ``htda simulate --columns`` names them beside the file, for traces with other
columns or other names (:class:`Columns`).  What goes wrong with a layout is said with the file's line, and a
first line of other names gets a guess at what ``--columns`` should say.
"""

from __future__ import annotations

import csv
import datetime
import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from . import TraceError

__all__ = ["COLUMNS", "SKIPPED", "Columns", "columns_and_rows", "date_time_seconds", "header_hint"]


#: the columns a CSV trace's header row (or ``--columns``) may name, in the order of a file without a header
COLUMNS = ("timestamp", "object_id", "size_bytes", "group_id")
#: what :meth:`Columns.given` calls a column that is not read
SKIPPED = "_"


@dataclass(frozen=True, slots=True)
class Columns:
    """Where a CSV trace's fields are in each row: by the header row's names, by names given beside the file
    (:meth:`given`: ``htda simulate --columns``), or in the order of :data:`COLUMNS` (the group optional) without
    either.  The names may leave out the timestamp (each request's number in the file is its time: traces of
    request order alone), the size (every object one byte: the byte hit ratio is then the hit ratio) and the
    group; ``None`` for a column the trace does not have.  ``from_outside``: given beside the file, whose own
    header row, if it has one, is skipped (:meth:`is_header`).  ``delimiter``: between fields (``None``: any run
    of spaces and tabs, as block traces are often written)."""

    time: int | None = 0
    object: int = 1
    size: int | None = 2
    group: int | None = 3
    widths: tuple[int, ...] = (3, 4)  # how many fields a row may have
    layout: str = "3 or 4 fields (timestamp,object_id,size_bytes[,group_id]; a header row names other layouts)"
    from_outside: bool = False
    delimiter: str | None = ","

    @classmethod
    def named(cls, header: list[str], path: str, delimiter: str | None = ",") -> Columns:
        """The columns a header row names (:class:`TraceError` for a name that is not a column, one named twice,
        or no object_id; for names that are not columns, it suggests what ``--columns`` might say)."""
        names = [field.strip().lower() for field in header]
        return cls._of(names, f"{path}, line 1: the header",
                       f"name the file's columns with --columns{_suggested_columns(names)}", outside=False,
                       delimiter=delimiter)

    @classmethod
    def given(cls, text: str) -> Columns:
        """The columns ``text`` names, in the file's order, comma-separated: those of :data:`COLUMNS`, and
        :data:`SKIPPED` for a column not read (``_,timestamp,_,size_bytes,object_id``); :class:`ValueError` names
        what is wrong."""
        names = [name.strip().lower() for name in text.split(",")]
        return cls._of(names, f"columns {text!r}", f"{SKIPPED} for one not read", outside=True)

    @classmethod
    def _of(cls, names: list[str], where: str, others: str, outside: bool, delimiter: str | None = ",") -> Columns:
        for name in names:
            if outside and name == SKIPPED:
                continue
            if name not in COLUMNS:
                raise TraceError(f"{where} names a column {name!r}; a trace's columns are {', '.join(COLUMNS)} "
                                 f"({others})")
            if names.count(name) > 1:
                raise TraceError(f"{where} names {name} twice")
        if "object_id" not in names:
            raise TraceError(f"{where} names no object_id column")
        if not outside and names in (list(COLUMNS[:3]), list(COLUMNS)):
            return cls(delimiter=delimiter)  # as without a header: the group may be left out row by row

        def at(name: str) -> int | None:
            return names.index(name) if name in names else None

        n = len(names)
        widths: tuple[int, ...] = (n,)
        count = f"{n} field{'s' if n > 1 else ''}"
        if names[-1] == "group_id":  # the group may be left out row by row, as without a header
            widths, count = (n - 1, n), f"{n - 1} or {n} fields"
        return cls(at("timestamp"), names.index("object_id"), at("size_bytes"), at("group_id"), widths,
                   f"{count} ({','.join(names)}, as {'--columns names' if outside else 'the header names'} them)",
                   outside, delimiter)

    def is_header(self, row: list[str]) -> bool:
        """Whether a first row is a header (columns given beside the file: a row whose timestamp and size, those of
        them the columns have, are not numbers; with neither, no row is)."""
        if not self.from_outside:
            return any(field.strip().lower() in COLUMNS for field in row)
        checks = [(at, is_number) for at, is_number in ((self.time, _is_time), (self.size, _is_size)) if at is not None]
        return bool(checks) and len(row) in self.widths and not any(is_number(row[at]) for at, is_number in checks)


#: names other traces give the columns (a guess offered in an error, never applied unasked)
_KNOWN_AS = {"timestamp": ("time", "ts", "t", "clock_time", "date", "datetime"),
             "object_id": ("id", "key", "obj_id", "object", "lbn", "lba", "block", "path", "lfn", "file", "filename",
                           "url"),
             "size_bytes": ("size", "bytes", "obj_size", "object_size", "length", "len"),
             "group_id": ("group", "dataset", "task")}


def header_hint(row: list[str]) -> str:
    """What an error about line 1 adds: it may be a comment, its fields may be separated otherwise, it may hold ids
    alone, or it may be a header of other names."""
    if row and row[0].lstrip().startswith("#"):  # not skipped unasked: an object's id may start with '#'
        return " (it looks like a comment: a trace has none; grep -v '^#' leaves them out)"
    if len(row) == 1 and len(row[0].split()) > 1:
        return " (its fields look separated by spaces or tabs: --delimiter space reads them)"
    if len(row) == 1:  # libCacheSim's txt traces, block numbers one a line
        return " (a trace of object ids alone, one a line, reads with --columns object_id)"
    if any(_is_time(field) for field in row):  # a number or a date-time: a request of another layout
        return (f" (if each row is a request of {len(row)} fields: --columns names them in order, each one of "
                f"{', '.join(COLUMNS)} or _ for one not read, at least object_id)")
    names = [field.strip().lower() for field in row]
    return (f" (if line 1 is a header: a header row names the columns {', '.join(COLUMNS)}, or --columns names the "
            f"file's{_suggested_columns(names)})")


def _suggested_columns(names: list[str]) -> str:
    """``", perhaps --columns ..."`` for a header of other names, where each of the columns is named at most once
    and object_id is named; else ``""``."""
    guess = [next((column for column, known in _KNOWN_AS.items() if name in known or name == column), SKIPPED)
             for name in names]
    named = [column for column in guess if column != SKIPPED]
    if "object_id" not in named or len(named) != len(set(named)):
        return ""
    return f", perhaps --columns {','.join(guess)}"


def _is_time(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return date_time_seconds(text) is not None
    return True


def date_time_seconds(text: str) -> float | None:
    """An ISO 8601 date-time, as servers log them (``2025-01-29T18:47:47.073974636Z``; UTC unless it names its
    zone), in seconds since 1970; None if ``text`` is not one."""
    try:
        when = datetime.datetime.fromisoformat(text.strip())
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return when.timestamp()


def _is_size(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


def columns_and_rows(fh: Iterable[str], path: str = "", given: Columns | None = None) \
        -> tuple[Columns, Iterator[tuple[int, list[str]]]]:
    """The trace's columns (``given``, else its header's, else the default) and its (line number, fields) of the
    rows that are requests: not blank, not the header."""
    columns = given or Columns()
    rows = _rows(fh, path, columns.delimiter)
    first = next(rows, None)
    if first is None:
        return columns, rows
    line_no, row = first
    if line_no == 1 and columns.is_header(row):
        return (columns if columns.from_outside else Columns.named(row, path, columns.delimiter)), rows
    return columns, itertools.chain([first], rows)


def _rows(fh: Iterable[str], path: str, delimiter: str | None) -> Iterator[tuple[int, list[str]]]:
    """(line number, fields) of the rows that are not blank: CSV rows with this delimiter, or runs of spaces and
    tabs between fields (``None``)."""
    if delimiter is None:
        for line_no, line in enumerate(fh, 1):
            if fields := line.split():
                yield line_no, fields
        return
    reader = csv.reader(fh, delimiter=delimiter)
    try:
        for row in reader:
            if not row or (len(row) == 1 and not row[0].strip()):
                continue
            yield reader.line_num, row
    except csv.Error as exc:  # a field past the csv module's limit, a NUL byte: not a trace's row
        raise TraceError(f"{path}, line {reader.line_num}: not a CSV row ({exc})") from None

"""Compact per-file and per-group storage for the coordinator's rating state (issue 18).

File and group ids are dense integers from the database (1..N), so what the
state keeps per file is a column of a typed array indexed by the id — 4 to 8
bytes a file — instead of a dict of Python objects (~60-190 bytes a file
with the int key, the value object and the hash slot):

:class:`Column`
    one machine number per file id (``array.array``, grown by doubling),
    with a sentinel for "absent"; it reads like the ``dict`` it replaces
    (``get``, ``[]``, ``in``, iteration over the present ids).
:class:`SizeColumn`
    the files' sizes; ``None`` (unknown size) has its own sentinel.
:class:`Membership`
    the files of each group, CSR-like: one flat array of file ids sorted by
    group and an offset per group, built in bulk at start-up, plus a small
    overlay of the groups that gained files since (folded in when it grows).
:class:`LfnCache`
    the LFNs of the files that need one now (placed, replicated, pinned);
    the others are read from the database in bulk when asked for.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["Column", "LfnCache", "Membership", "SizeColumn"]

#: fold the overlay of :class:`Membership` into its arrays when it holds this share of the groups (and ...)
OVERLAY_SHARE = 0.25
#: ... at least this many groups (folding costs a pass over every membership)
OVERLAY_MIN = 50_000


class Column(Mapping[int, Any]):
    """One number per file id, ``missing`` where there is none; a ``dict[int, number]`` look-alike.

    ``typecode`` is an :mod:`array` type code: ``"d"`` (8-byte float), ``"q"`` (8-byte int), ``"i"``
    (4-byte int: group ids)."""

    def __init__(self, typecode: str, missing: float | int):
        self.missing = missing
        self.data: array[Any] = array(typecode)
        self._count = 0

    def _grow(self, index: int) -> None:
        """Make room for ``index`` (doubling, so appending ids one by one costs O(1) each)."""
        need = index + 1 - len(self.data)
        if need > 0:
            self.data.extend(array(self.data.typecode, [self.missing]) * max(need, len(self.data), 1024))

    def reserve(self, top: int) -> None:
        """Room for ids up to ``top`` exactly (at start-up, when the largest id is known: no doubling slack)."""
        need = top + 1 - len(self.data)
        if need > 0:
            self.data.extend(array(self.data.typecode, [self.missing]) * need)

    def get(self, index: int, default: Any = None) -> Any:
        data = self.data
        if 0 <= index < len(data):
            value = data[index]
            if value != self.missing:
                return value
        return default

    def __getitem__(self, index: int) -> Any:
        value = self.get(index, self)
        if value is self:
            raise KeyError(index)
        return value

    def __setitem__(self, index: int, value: Any) -> None:
        if index < 0:
            raise KeyError(index)
        self._grow(index)
        if self.data[index] == self.missing:
            self._count += 1
        self.data[index] = value

    def __contains__(self, index: object) -> bool:
        return isinstance(index, int) and self.get(index, self) is not self

    def raise_to(self, indices: Sequence[int], value: Any) -> list[int]:
        """Set ``value`` at each of ``indices`` where it is greater than the value there (an absent one counts as
        ``missing``); return those indices.  One call per group in the state's refresh: its hot loop."""
        if not indices:
            return []
        self._grow(max(indices))
        data, missing, raised = self.data, self.missing, []
        for index in indices:
            old = data[index]
            if value > old:
                if old == missing:
                    self._count += 1
                data[index] = value
                raised.append(index)
        return raised

    def set_many(self, indices: Sequence[int], value: Any) -> None:
        """``self[i] = value`` for each of ``indices`` (non-negative)."""
        if not indices:
            return
        self._grow(max(indices))
        data, missing = self.data, self.missing
        for index in indices:
            if data[index] == missing:
                self._count += 1
            data[index] = value

    def take(self, indices: np.ndarray) -> np.ndarray:
        """The stored numbers at ``indices`` (``missing`` where there is none), as a new array: the work
        cycle's bulk reads, one C loop instead of a ``get`` per id.  The caller holds the lock that guards
        growth: the array cannot grow while numpy views its buffer."""
        out = np.full(len(indices), self.missing, dtype=self.data.typecode)
        if len(self.data):
            view = np.frombuffer(self.data, dtype=self.data.typecode)
            inside = (indices >= 0) & (indices < len(view))
            out[inside] = view[indices[inside]]
            del view  # release the buffer at once, so that the array may grow again
        return out

    def __iter__(self) -> Iterator[int]:
        missing = self.missing
        return (i for i, value in enumerate(self.data) if value != missing)

    def __len__(self) -> int:
        return self._count

    def nbytes(self) -> int:
        return self.data.itemsize * len(self.data)


class SizeColumn(Column):
    """File sizes in bytes: absent for an unknown file id, ``None`` for a known file of unknown size."""

    _NONE = -1

    def __init__(self) -> None:
        super().__init__("q", -2)

    def get(self, index: int, default: Any = None) -> Any:
        data = self.data
        if 0 <= index < len(data):
            value = data[index]
            if value >= 0:
                return value
            if value == self._NONE:
                return None
        return default

    def __setitem__(self, index: int, value: int | None) -> None:
        super().__setitem__(index, self._NONE if value is None else value)


class Membership:
    """The files of each group (sorted tuples of file ids), CSR-like; see the module docstring.

    ``get(gid)`` returns the group's files as a sorted tuple (a fresh one, from the arrays), or ``default``
    for a group without files."""

    def __init__(self) -> None:
        self._offsets = array("q", [0])  # the files of group g: _flat[_offsets[g]:_offsets[g + 1]]
        self._flat = array("i")  # file ids are the database's 4-byte integers
        self._extra: dict[int, tuple[int, ...]] = {}  # groups changed since the arrays were built: all their files

    def load(self, pairs: Iterable[tuple[int, int]]) -> None:
        """Replace everything by these (group id, file id) pairs (start-up: a counting sort with numpy)."""
        groups, files = array("i"), array("i")
        for gid, fid in pairs:
            groups.append(gid)
            files.append(fid)
        self._build(np.frombuffer(groups, dtype=np.int32) if groups else np.zeros(0, np.int32),
                    np.frombuffer(files, dtype=np.int32) if files else np.zeros(0, np.int32))
        self._extra = {}

    def _build(self, groups: np.ndarray, files: np.ndarray) -> None:
        order = np.lexsort((files, groups))
        groups, files = groups[order], files[order]
        if len(groups) > 1:  # a pair given twice counts once
            keep = np.ones(len(groups), dtype=bool)
            keep[1:] = (groups[1:] != groups[:-1]) | (files[1:] != files[:-1])
            groups, files = groups[keep], files[keep]
        counts = np.bincount(groups, minlength=1) if len(groups) else np.zeros(1, np.int64)
        offsets = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        self._offsets, self._flat = array("q"), array("i")
        self._offsets.frombytes(offsets.tobytes())
        self._flat.frombytes(files.astype(np.int32).tobytes())

    def get(self, gid: int, default: Any = ()) -> Any:
        files = self._extra.get(gid)
        if files is not None:
            return files
        offsets = self._offsets
        if 0 <= gid < len(offsets) - 1:
            start, stop = offsets[gid], offsets[gid + 1]
            if start < stop:
                return tuple(self._flat[start:stop])
        return default

    @property
    def overlay(self) -> int:
        """Groups kept outside the arrays (changed since they were last built; folded in past a few)."""
        return len(self._extra)

    def count(self, gid: int) -> int:
        """The number of files of ``gid``."""
        files = self._extra.get(gid)
        if files is not None:
            return len(files)
        offsets = self._offsets
        return offsets[gid + 1] - offsets[gid] if 0 <= gid < len(offsets) - 1 else 0

    def add(self, pairs: Iterable[tuple[int, int]]) -> set[int]:
        """Add (group id, file id) pairs; return the groups that gained files."""
        new: dict[int, set[int]] = {}
        for gid, fid in pairs:
            new.setdefault(gid, set()).add(fid)
        grown = set()
        for gid, fids in new.items():
            current = self.get(gid)
            fids.difference_update(current)
            if fids:
                self._extra[gid] = tuple(sorted((*current, *fids)))
                grown.add(gid)
        if len(self._extra) > max(OVERLAY_MIN, OVERLAY_SHARE * (len(self._offsets) - 1)):
            self._fold()
        return grown

    def _fold(self) -> None:
        """Move the overlay into the arrays (a pass over every membership, amortised over the overlay's groups)."""
        offsets = np.frombuffer(self._offsets, dtype=np.int64)
        flat = np.frombuffer(self._flat, dtype=np.int32) if self._flat else np.zeros(0, np.int32)
        groups = np.repeat(np.arange(len(offsets) - 1, dtype=np.int32), np.diff(offsets))
        changed = np.fromiter(self._extra, dtype=np.int32, count=len(self._extra))
        keep = ~np.isin(groups, changed)
        extra_groups = np.fromiter((g for g, fids in self._extra.items() for _ in fids), dtype=np.int32)
        extra_files = np.fromiter((f for fids in self._extra.values() for f in fids), dtype=np.int32)
        self._build(np.concatenate([groups[keep], extra_groups]), np.concatenate([flat[keep], extra_files]))
        self._extra = {}

    def groups(self) -> Iterator[int]:
        """The ids of the groups that have files."""
        offsets = self._offsets
        for gid in range(len(offsets) - 1):
            if gid not in self._extra and offsets[gid] < offsets[gid + 1]:
                yield gid
        yield from self._extra

    def nbytes(self) -> int:
        return 8 * len(self._offsets) + 4 * len(self._flat) + sum(56 + 8 * len(t) for t in self._extra.values())


class LfnCache:
    """The LFNs of the files that need one now; any other is fetched from the database (``fetch``: ids -> LFNs).

    :meth:`retain` sets the files whose LFNs are kept (the placed, replicated and pinned ones: the assignment
    lists), fetching those missing in one bulk query.  Without ``fetch`` (a state not backed by a database,
    in tests) every LFN offered is kept."""

    def __init__(self, fetch: Callable[[Iterable[int]], dict[int, str]] | None = None):
        self.fetch = fetch
        self._lfns: dict[int, str] = {}
        self._wanted: frozenset[int] | set[int] = frozenset()

    def offer(self, fid: int, lfn: str) -> None:
        """An LFN seen in passing (ingest): kept if the file needs it, or if there is no database to ask."""
        if self.fetch is None or fid in self._wanted:
            self._lfns[fid] = lfn

    def retain(self, wanted: set[int]) -> None:
        """Keep the LFNs of ``wanted`` only, fetching the missing ones; the map is replaced whole (readers take
        no lock)."""
        if self.fetch is None:
            return
        old = self._lfns
        lfns = {fid: old[fid] for fid in wanted if fid in old}
        missing = [fid for fid in wanted if fid not in lfns]
        if missing:
            lfns.update(self.fetch(missing))
        self._wanted, self._lfns = wanted, lfns

    def __getitem__(self, fid: int) -> str:
        lfn = self._lfns.get(fid)
        if lfn is None:
            if self.fetch is None or (lfn := self.fetch([fid]).get(fid)) is None:
                raise KeyError(fid)
        return lfn

    def many(self, fids: Iterable[int]) -> dict[int, str]:
        """The LFNs of ``fids`` (known ones only), with one query for those not kept."""
        fids, lfns = list(fids), self._lfns
        out = {fid: lfns[fid] for fid in fids if fid in lfns}
        missing = [fid for fid in fids if fid not in out]
        if missing and self.fetch is not None:
            out.update(self.fetch(missing))
        return out

    def __len__(self) -> int:
        return len(self._lfns)

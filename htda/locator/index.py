"""The locator's index: which cache node holds which LFN, and how many bytes of it.

Writers (holdings reports, members leaving) take a lock; readers (lookups) do
not.  That works because the per-LFN entries are never mutated in place: a
writer builds a new small entry and swaps it in with one assignment, so a
reader sees either the old or the new one, never one that changes under it.
An entry is small, since there may be millions: the holder set (shared by
every file held by the same nodes, with its JSON encoded once) and the
reported sizes, an int for the usual single holder.  The lookup loop does two
dict operations per LFN and sums bytes per holder *set*, expanded to nodes
once.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable
from typing import Any, NamedTuple

from ..lfn import normalize_lfn

__all__ = ["HoldingsIndex", "LookupResult"]

class LookupResult(NamedTuple):
    """What a batch lookup found."""

    files_json: str  # the JSON object {lfn: [node, ...]} for the requested LFNs, in request order
    nodes: dict[str, dict[str, Any]]  # node -> {files, bytes, fraction}
    requested: int  # distinct LFNs asked for
    held: int  # of those, held by some node


class _Holders(NamedTuple):
    """A set of holders, shared by every file held by exactly those nodes (most files: one node)."""

    key: tuple[str, ...]  # the nodes, sorted: hashable, the lookup sums bytes per holder set
    nodes_json: str  # the same as a JSON array, encoded once per set


class _Entry(NamedTuple):
    holders: _Holders
    sizes: int | tuple[int, ...]  # the size each holder reported (an int for one holder: most files)

    @property
    def size(self) -> int:
        """The file's size: the largest reported, at least 1."""
        return max(self.sizes if isinstance(self.sizes, int) else max(self.sizes), 1)

    def by_node(self) -> dict[str, int]:
        if isinstance(self.sizes, int):
            return {self.holders.key[0]: self.sizes}
        return dict(zip(self.holders.key, self.sizes))


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def _json_string(lfn: str) -> str:
    """``lfn`` as a JSON string; canonical LFNs are plain ASCII, which needs no escaping."""
    if lfn.isascii() and lfn.isprintable() and '"' not in lfn and "\\" not in lfn:
        return f'"{lfn}"'
    return _dumps(lfn)


class HoldingsIndex:
    """LFN -> {node: size}, with a per-node view for replaces and drops."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # writers only: lookups read _files without it (see the module doc)
        self._files: dict[str, _Entry] = {}  # lfn -> its holders; entries replaced, never mutated
        self._nodes: dict[str, dict[str, int]] = {}  # node -> {lfn: size}
        self._bytes: dict[str, int] = {}  # node -> sum of its sizes
        self._updated: dict[str, float] = {}  # node -> wall time of its last report
        # holder set -> its one shared description; sets no file uses any more stay (there are at most as
        # many as distinct combinations of nodes ever seen together, and few combinations recur)
        self._holder_sets: dict[tuple[str, ...], _Holders] = {}

    # -- writes ----------------------------------------------------------------
    def replace(self, node: str, files: dict[str, int]) -> int:
        """Make ``files`` the complete holding list of ``node``; return how many it holds."""
        with self._lock:
            held = self._nodes.get(node, {})
            for lfn in held.keys() - files.keys():
                self._unset(lfn, node)
            for lfn, size in files.items():
                if held.get(lfn) != size:
                    self._set(lfn, node, size)
            self._nodes[node] = dict(files)
            self._bytes[node] = sum(files.values())
            self._updated[node] = time.time()
            return len(files)

    def update(self, node: str, added: dict[str, int], removed: Iterable[str]) -> int:
        """Apply a delta report of ``node``; return how many files it holds afterwards."""
        with self._lock:
            held = self._nodes.setdefault(node, {})
            total = self._bytes.get(node, 0)
            for lfn in removed:
                if lfn in held and lfn not in added:
                    total -= held.pop(lfn)
                    self._unset(lfn, node)
            for lfn, size in added.items():
                old = held.get(lfn)
                if old != size:
                    total += size - (old or 0)
                    held[lfn] = size
                    self._set(lfn, node, size)
            self._bytes[node] = total
            self._updated[node] = time.time()
            return len(held)

    def drop(self, node: str) -> int:
        """Forget every entry of ``node``; return how many there were."""
        with self._lock:
            held = self._nodes.pop(node, {})
            for lfn in held:
                self._unset(lfn, node)
            self._bytes.pop(node, None)
            self._updated.pop(node, None)
            return len(held)

    def _set(self, lfn: str, node: str, size: int) -> None:
        entry = self._files.get(lfn)
        self._files[lfn] = self._entry({**entry.by_node(), node: size} if entry else {node: size})

    def _unset(self, lfn: str, node: str) -> None:
        entry = self._files.get(lfn)
        if entry is None or node not in entry.holders.key:
            return
        if len(entry.holders.key) == 1:
            del self._files[lfn]
        else:
            self._files[lfn] = self._entry({n: s for n, s in entry.by_node().items() if n != node})

    def _entry(self, sizes: dict[str, int]) -> _Entry:
        """An entry for a file held with ``sizes``; its holder set is shared with every file held alike."""
        key = tuple(sorted(sizes))
        holders = self._holder_sets.get(key)
        if holders is None:
            holders = self._holder_sets[key] = _Holders(key, _dumps(list(key)))
        return _Entry(holders, sizes[key[0]] if len(key) == 1 else tuple(sizes[n] for n in key))

    # -- reads -----------------------------------------------------------------
    def lookup(self, lfns: Iterable[str]) -> LookupResult:
        """Holders of each LFN (as JSON) and, per holder, the share of the requested bytes it holds.

        A file's size is the largest size any holder reported (at least 1
        byte).  A file no node holds has no known size; it counts as the mean
        size of the requested files that are held (1 byte when none is), so
        it dilutes every node's fraction as a typical input would.  Repeated
        LFNs count once.  Raises ValueError for an LFN that is not valid.
        """
        get = self._files.get
        fragments: list[str] = []
        set_bytes: dict[tuple[str, ...], int] = {}
        set_files: dict[tuple[str, ...], int] = {}
        unheld = 0
        for lfn in dict.fromkeys(lfns):
            entry = get(lfn)
            if entry is None:
                # Index keys are canonical, so only a miss needs the (slower) validation.
                entry = get(normalize_lfn(lfn))
                if entry is None:
                    fragments.append(f"{_json_string(lfn)}:[]")
                    unheld += 1
                    continue
            holders = entry.holders
            fragments.append(f"{_json_string(lfn)}:{holders.nodes_json}")
            key = holders.key
            set_bytes[key] = set_bytes.get(key, 0) + entry.size
            set_files[key] = set_files.get(key, 0) + 1
        held_bytes: dict[str, int] = {}
        held_files: dict[str, int] = {}
        for key, size in set_bytes.items():
            for node in key:
                held_bytes[node] = held_bytes.get(node, 0) + size
                held_files[node] = held_files.get(node, 0) + set_files[key]
        known_bytes = sum(set_bytes.values())
        held = len(fragments) - unheld
        total = known_bytes + unheld * (known_bytes / held if held else 1)
        nodes = {node: {"files": held_files[node], "bytes": b, "fraction": round(b / total, 6)}
                 for node, b in held_bytes.items()}
        return LookupResult("{" + ",".join(fragments) + "}", nodes, len(fragments), held)

    def holders(self, lfn: str) -> dict[str, int]:
        """{node: size} of one LFN (empty when nobody holds it)."""
        entry = self._files.get(lfn)
        return entry.by_node() if entry else {}

    def nodes(self) -> dict[str, dict[str, Any]]:
        """Per node: files, bytes and the time of its last report."""
        with self._lock:
            return {node: {"files": len(held), "bytes": self._bytes.get(node, 0), "updated": self._updated[node]}
                    for node, held in self._nodes.items()}

    def node_names(self) -> list[str]:
        with self._lock:
            return list(self._nodes)

    @property
    def file_count(self) -> int:
        return len(self._files)

    @property
    def node_count(self) -> int:
        return len(self._nodes)

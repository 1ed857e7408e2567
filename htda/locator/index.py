"""The locator's index: which cache node holds which LFN, and how many bytes of it.

Writers (holdings reports, members leaving) take a lock; readers (lookups) do
not.  That works because the per-LFN entries are never mutated in place: a
writer builds a new small entry and swaps it in with one assignment, so a
reader sees either the old or the new one, never one that changes under it.
An entry carries what a lookup needs precomputed (the holder list, a hashable
key of the holder set, the file's size), so the lookup loop does two dict
operations per LFN and sums bytes per holder *set*, expanded to nodes once.
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


class _Entry(NamedTuple):
    sizes: dict[str, int]  # node -> size it reported
    nodes_json: str  # the holders as a JSON array
    fragment: str  # '"<lfn>":[holders]', ready for the answer (encoded once, when the entry changes)
    key: tuple[str, ...]  # the holder set, hashable
    size: int  # the file's size: the largest reported, at least 1


def _entry(lfn: str, sizes: dict[str, int]) -> _Entry:
    nodes = tuple(sorted(sizes))
    nodes_json = _dumps(list(nodes))
    return _Entry(sizes, nodes_json, f"{_dumps(lfn)}:{nodes_json}", nodes, max(max(sizes.values()), 1))


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


class HoldingsIndex:
    """LFN -> {node: size}, with a per-node view for replaces and drops."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._files: dict[str, _Entry] = {}  # lfn -> its holders; entries replaced, never mutated
        self._nodes: dict[str, dict[str, int]] = {}  # node -> {lfn: size}
        self._bytes: dict[str, int] = {}  # node -> sum of its sizes
        self._updated: dict[str, float] = {}  # node -> wall time of its last report

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
        self._files[lfn] = _entry(lfn, {**entry.sizes, node: size} if entry else {node: size})

    def _unset(self, lfn: str, node: str) -> None:
        entry = self._files.get(lfn)
        if entry is None or node not in entry.sizes:
            return
        if len(entry.sizes) == 1:
            del self._files[lfn]
        else:
            self._files[lfn] = _entry(lfn, {n: s for n, s in entry.sizes.items() if n != node})

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
            if entry is not None:
                fragments.append(entry.fragment)
            else:
                # Index keys are canonical, so only a miss needs the (slower) validation.
                entry = get(normalize_lfn(lfn))
                if entry is None:
                    fragments.append(f"{_dumps(lfn)}:[]")
                    unheld += 1
                    continue
                fragments.append(f"{_dumps(lfn)}:{entry.nodes_json}")
            key = entry.key
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
        return dict(entry.sizes) if entry else {}

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

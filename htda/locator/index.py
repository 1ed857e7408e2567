"""The locator's index: which cache node holds which LFN, and how many bytes of it.

Writers (holdings reports, members leaving) take a lock; readers (lookups) do
not.  That works because the per-LFN holder maps are never mutated in place:
a writer builds a new small dict and swaps it in with one assignment, so a
reader sees either the old or the new map, never one that changes under it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from typing import Any

from ..lfn import normalize_lfn

__all__ = ["HoldingsIndex", "LookupResult"]

#: (holders of each requested LFN, per-node {files, bytes, fraction})
LookupResult = tuple[dict[str, list[str]], dict[str, dict[str, Any]]]


class HoldingsIndex:
    """LFN -> {node: size}, with a per-node view for replaces and drops."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._files: dict[str, dict[str, int]] = {}  # lfn -> {node: size}; values replaced, never mutated
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
        holders = self._files.get(lfn)
        self._files[lfn] = {**holders, node: size} if holders else {node: size}

    def _unset(self, lfn: str, node: str) -> None:
        holders = self._files.get(lfn)
        if holders is None or node not in holders:
            return
        if len(holders) == 1:
            del self._files[lfn]
        else:
            self._files[lfn] = {n: s for n, s in holders.items() if n != node}

    # -- reads -----------------------------------------------------------------
    def lookup(self, lfns: Iterable[str]) -> LookupResult:
        """Holders of each LFN and, per holder, the share of the requested bytes it holds.

        A file's size is the largest size any holder reported (at least 1
        byte).  A file no node holds has no known size; it counts as the mean
        size of the requested files that are held (1 byte when none is), so
        it dilutes every node's fraction as a typical input would.  Repeated
        LFNs count once.  Raises ValueError for an LFN that is not valid.
        """
        files = self._files
        answer: dict[str, list[str]] = {}
        held_files: dict[str, int] = {}
        held_bytes: dict[str, int] = {}
        known_bytes = 0
        unheld = 0
        for lfn in lfns:
            if lfn in answer:
                continue
            holders = files.get(lfn)
            if holders is None:
                # Index keys are canonical, so only a miss needs the (slower) validation.
                holders = files.get(normalize_lfn(lfn))
                if holders is None:
                    answer[lfn] = []
                    unheld += 1
                    continue
            answer[lfn] = list(holders)
            size = max(max(holders.values()), 1)
            known_bytes += size
            for node in holders:
                held_files[node] = held_files.get(node, 0) + 1
                held_bytes[node] = held_bytes.get(node, 0) + size
        held_count = len(answer) - unheld
        total = known_bytes + unheld * (known_bytes / held_count if held_count else 1)
        nodes = {node: {"files": held_files[node], "bytes": b, "fraction": round(b / total, 6)}
                 for node, b in held_bytes.items()}
        return answer, nodes

    def holders(self, lfn: str) -> dict[str, int]:
        """{node: size} of one LFN (empty when nobody holds it)."""
        return dict(self._files.get(lfn, {}))

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

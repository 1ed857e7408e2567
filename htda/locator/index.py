"""The locator's index: which cache node holds which LFN, and how many bytes of it.

An LFN is kept as its 64-bit string hash, not as text: the index never lists LFNs (a lookup answers with the
LFNs it was asked for), and a 100-character LFN would otherwise cost about 150 bytes per file, more than the
rest of its entry.  Python's string hash is SipHash keyed by a secret drawn when the process starts (do not set
``PYTHONHASHSEED`` for the daemon), so nobody can make two LFNs collide on purpose, and a chance collision, one
in about 2**64 / files, costs no more than a wrong preference: the job still reads through the union view.

Writers (holdings reports, members leaving) take a lock; readers (lookups) do not.  That works because a
file's entry is an immutable holder set (shared by every file held by the same nodes, with its JSON encoded
once) that a writer swaps in with one assignment, so a reader sees either the old or the new set.  Sizes live in
the per-node maps; a writer stores a size before it names the node a holder and forgets the size only after,
so a reader finds a size for every holder it sees (or, while a node is dropped, counts the file as 1 byte).
The lookup loop does two dict operations per LFN, sums bytes per holder *set* and expands sets to nodes once.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable
from typing import Any, NamedTuple

from ..lfn import normalize_lfn
from ..node.clock import SYSTEM_CLOCK, Clock

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


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def _json_string(lfn: str) -> str:
    """``lfn`` as a JSON string; canonical LFNs are plain ASCII, which needs no escaping."""
    if lfn.isascii() and lfn.isprintable() and '"' not in lfn and "\\" not in lfn:
        return f'"{lfn}"'
    return _dumps(lfn)


_key = hash  # an LFN's key in the index (see the module doc)


class HoldingsIndex:
    """LFN -> {node: size}, with a per-node view for replaces and drops."""

    def __init__(self, clock: Clock = SYSTEM_CLOCK) -> None:
        self.clock = clock
        self._lock = threading.Lock()  # writers only: lookups read without it (see the module doc)
        self._files: dict[int, _Holders] = {}  # LFN key -> its holders; sets swapped, never mutated
        self._nodes: dict[str, dict[int, int]] = {}  # node -> {LFN key: size}
        self._bytes: dict[str, int] = {}  # node -> sum of its sizes
        self._updated: dict[str, float] = {}  # node -> wall time of its last report
        # holder set -> its one shared description; sets no file uses any more stay (there are at most as
        # many as distinct combinations of nodes ever seen together, and few combinations recur)
        self._holder_sets: dict[tuple[str, ...], _Holders] = {}

    # -- writes ----------------------------------------------------------------
    def replace(self, node: str, files: dict[str, int]) -> int:
        """Make ``files`` the complete holding list of ``node``; return how many it holds."""
        wanted = {_key(lfn): size for lfn, size in files.items()}
        with self._lock:
            held = self._nodes.setdefault(node, {})
            for key in held.keys() - wanted.keys():
                self._unset(key, node)
                del held[key]
            for key, size in wanted.items():
                if held.get(key) != size:
                    self._set(key, node, size, held)
            self._bytes[node] = sum(held.values())
            self._updated[node] = self.clock.time()
            return len(held)

    def update(self, node: str, added: dict[str, int], removed: Iterable[str]) -> int:
        """Apply a delta report of ``node``; return how many files it holds afterwards."""
        gained = {_key(lfn): size for lfn, size in added.items()}
        with self._lock:
            held = self._nodes.setdefault(node, {})
            total = self._bytes.get(node, 0)
            for key in map(_key, removed):
                if key in held and key not in gained:
                    self._unset(key, node)
                    total -= held.pop(key)
            for key, size in gained.items():
                old = held.get(key)
                if old != size:
                    total += size - (old or 0)
                    self._set(key, node, size, held)
            self._bytes[node] = total
            self._updated[node] = self.clock.time()
            return len(held)

    def drop(self, node: str) -> int:
        """Forget every entry of ``node``; return how many there were."""
        with self._lock:
            held = self._nodes.get(node, {})
            for key in held:
                self._unset(key, node)
            self._nodes.pop(node, None)
            self._bytes.pop(node, None)
            self._updated.pop(node, None)
            return len(held)

    def _set(self, key: int, node: str, size: int, held: dict[int, int]) -> None:
        held[key] = size  # first the size, then the holder set that names the node (see the module doc)
        holders = self._files.get(key)
        if holders is None:
            self._files[key] = self._holders((node,))
        elif node not in holders.key:
            self._files[key] = self._holders(tuple(sorted((*holders.key, node))))

    def _unset(self, key: int, node: str) -> None:
        holders = self._files.get(key)
        if holders is None or node not in holders.key:
            return
        if len(holders.key) == 1:
            del self._files[key]
        else:
            self._files[key] = self._holders(tuple(n for n in holders.key if n != node))

    def _holders(self, key: tuple[str, ...]) -> _Holders:
        """The one shared holder set of the nodes ``key`` (sorted)."""
        holders = self._holder_sets.get(key)
        if holders is None:
            holders = self._holder_sets[key] = _Holders(key, _dumps(list(key)))
        return holders

    def _size(self, key: int, holders: _Holders) -> int:
        """A file's size: the largest any holder reported, at least 1."""
        nodes = self._nodes
        if len(holders.key) == 1:
            return max(nodes.get(holders.key[0], {}).get(key, 1), 1)
        return max(max(nodes.get(n, {}).get(key, 1) for n in holders.key), 1)

    # -- reads -----------------------------------------------------------------
    def lookup(self, lfns: Iterable[str]) -> LookupResult:
        """Holders of each LFN (as JSON) and, per holder, the share of the requested bytes it holds.

        A file's size is the largest size any holder reported (at least 1
        byte).  A file no node holds has no known size; it counts as the mean
        size of the requested files that are held (1 byte when none is), so
        it dilutes every node's fraction as a typical input would.  Repeated
        LFNs count once.  Raises ValueError for an LFN that is not valid.
        """
        get, size_of = self._files.get, self._size
        fragments: list[str] = []
        set_bytes: dict[tuple[str, ...], int] = {}
        set_files: dict[tuple[str, ...], int] = {}
        unheld = 0
        for lfn in dict.fromkeys(lfns):
            key = _key(lfn)
            holders = get(key)
            if holders is None:
                # Index keys are of canonical LFNs, so only a miss needs the (slower) validation.
                key = _key(normalize_lfn(lfn))
                holders = get(key)
                if holders is None:
                    fragments.append(f"{_json_string(lfn)}:[]")
                    unheld += 1
                    continue
            fragments.append(f"{_json_string(lfn)}:{holders.nodes_json}")
            holder_set = holders.key
            set_bytes[holder_set] = set_bytes.get(holder_set, 0) + size_of(key, holders)
            set_files[holder_set] = set_files.get(holder_set, 0) + 1
        held_bytes: dict[str, int] = {}
        held_files: dict[str, int] = {}
        for holder_set, size in set_bytes.items():
            for node in holder_set:
                held_bytes[node] = held_bytes.get(node, 0) + size
                held_files[node] = held_files.get(node, 0) + set_files[holder_set]
        known_bytes = sum(set_bytes.values())
        held = len(fragments) - unheld
        total = known_bytes + unheld * (known_bytes / held if held else 1)
        nodes = {node: {"files": held_files[node], "bytes": b, "fraction": round(b / total, 6)}
                 for node, b in held_bytes.items()}
        return LookupResult("{" + ",".join(fragments) + "}", nodes, len(fragments), held)

    def holders(self, lfn: str) -> dict[str, int]:
        """{node: size} of one LFN (empty when nobody holds it)."""
        key = _key(lfn)
        holders = self._files.get(key)
        if holders is None:
            return {}
        return {node: self._nodes.get(node, {}).get(key, 0) for node in holders.key}

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

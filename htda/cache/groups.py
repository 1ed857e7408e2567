"""The hot input groups this cache node holds whole, by input key, for its machine ad.

A job's Requirements and Rank are written once, when the job is routed; a
copy made later (a replica of a group grown popular, a group first copied
after its jobs were queued) would never draw the jobs already waiting.  The
coordinator therefore names, with each assignment, the hot input groups it
gave this node whole (as positions in the file list); this node publishes the
input key (:func:`htda.protocol.coordinator.input_key`) of those whose every
file it holds now, the startd cron copies them into the machine ad
(``HTDA_CacheGroups``), and a job whose ``HTDA_InputKey`` is listed there
counts the machine as a full holder from the next negotiation cycle.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..lfn import normalize_lfn
from ..node.clock import Clock
from ..protocol.coordinator import AssignedFile, input_key

__all__ = ["HeldGroups"]


class HeldGroups:
    """Input keys of the assigned hot groups held whole.  The cache cycle calls :meth:`assigned` and
    :meth:`refresh` (under its lock); readers take :attr:`state`, a tuple replaced whole."""

    def __init__(self, clock: Clock):
        self.clock = clock
        self._groups: list[tuple[str, tuple[str, ...]]] = []  # (input key, the files' normalised LFNs)
        self.state: tuple[tuple[str, ...], float] = ((), 0.0)  # (keys held, when that list last changed)

    def assigned(self, files: Sequence[AssignedFile], groups: Sequence[Sequence[int]]) -> None:
        """The groups of a new assignment (positions in ``files``); a group naming a position out of range or
        a bad LFN is left out."""
        out = []
        for positions in groups:
            if not positions or not all(0 <= i < len(files) for i in positions):
                continue
            lfns = [files[i].lfn for i in positions]
            try:
                normalized = tuple(normalize_lfn(lfn) for lfn in lfns)
            except ValueError:
                continue
            out.append((input_key(lfns), normalized))  # the key of the LFNs as the jobs named them
        self._groups = out

    def refresh(self, holds: Callable[[str], bool]) -> None:
        """Recount the groups held whole (``holds(lfn)``: a valid copy is here); a new list is stamped now."""
        keys = tuple(dict.fromkeys(key for key, lfns in self._groups if all(map(holds, lfns))))
        if keys != self.state[0]:
            self.state = (keys, self.clock.time())

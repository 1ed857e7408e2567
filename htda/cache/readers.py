"""Which files jobs on this worker are reading from storage right now: their open file descriptors.

The coordinator defers the copy of a file that jobs are streaming from
storage (see :mod:`htda.coordinator.reads` for why).  A cache node learns
what its worker's jobs read by resolving ``/proc/<pid>/fd/*``: a descriptor
that resolves beneath the union view (or the storage mount behind it) names
an LFN, and an LFN the node holds no copy of is being read from storage.
Seeing other users' descriptors needs root or ``CAP_SYS_PTRACE`` (the
``htda-cache@`` unit grants it); without it the scan sees only the node's own
user, and copies are simply not deferred.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from ..lfn import normalize_lfn

__all__ = ["open_lfns"]


def _pids(proc: str) -> list[str]:
    try:
        return [name for name in os.listdir(proc) if name.isdigit()]
    except OSError:
        return []


def _targets(fd_dir: str) -> list[str]:
    try:
        names = os.listdir(fd_dir)
    except OSError:  # gone, or another user's without the capability
        return []
    out = []
    for name in names:
        try:
            out.append(os.readlink(os.path.join(fd_dir, name)))
        except OSError:
            continue
    return out


def open_lfns(lfn_of: Callable[[str], str | None], proc: str = "/proc",
              skip_pids: frozenset[int] = frozenset()) -> set[str]:
    """LFNs that some process (other than ``skip_pids``) has open, as ``lfn_of`` maps resolved paths."""
    found: set[str] = set()
    for pid in _pids(proc):
        if int(pid) in skip_pids:
            continue
        for target in _targets(os.path.join(proc, pid, "fd")):
            if not target.startswith("/") or target.endswith(" (deleted)"):
                continue
            lfn = lfn_of(target)
            if lfn is None:
                continue
            try:
                found.add(normalize_lfn(lfn))
            except ValueError:
                continue
    return found

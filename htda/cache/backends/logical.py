"""A logical cache device spreading files over several physical ones, like LVM's linear volumes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..ownership import Ownership, Perms
from .base import CacheDevice, FileStat, HeldFile, TemporaryCopy

__all__ = ["LogicalDevice"]


class LogicalDevice(CacheDevice):
    """One device made of ``members``; a new file goes to the member with the most free space.

    Reads, stats and deletes find the member that holds the LFN.  The union
    view stacks every member's branches, so a file is visible wherever it is.
    """

    name = "logical"

    def __init__(self, members: list[CacheDevice], options: dict[str, Any] | None = None):
        if not members:
            raise ValueError("a logical device needs at least one member device")
        super().__init__(",".join(m.path for m in members), options)
        self.members = list(members)

    def capacity_bytes(self) -> int:
        return sum(m.capacity_bytes() for m in self.members)

    def free_bytes(self) -> int:
        return sum(m.free_bytes() for m in self.members)

    def choose(self, size: int) -> CacheDevice | None:
        """The member with the most free space that can take ``size`` bytes, or None."""
        best = max(self.members, key=lambda m: m.free_bytes())
        return best if best.free_bytes() >= size else None

    def temporary(self, size_hint: int = 0) -> TemporaryCopy:
        member = self.choose(size_hint) or max(self.members, key=lambda m: m.free_bytes())
        return member.temporary(size_hint)

    def holder(self, lfn: str) -> CacheDevice:
        for member in self.members:
            try:
                member.stat(lfn)
                return member
            except (FileNotFoundError, NotADirectoryError):
                continue
        raise FileNotFoundError(lfn)

    def open(self, lfn: str) -> int:
        return self.holder(lfn).open(lfn)

    def stat(self, lfn: str) -> FileStat:
        return self.holder(lfn).stat(lfn)

    def set_ownership(self, lfn: str, ownership: Ownership) -> None:
        self.holder(lfn).set_ownership(lfn, ownership)

    def set_root_perms(self, perms: Perms) -> None:
        for member in self.members:
            member.set_root_perms(perms)

    def delete(self, lfn: str) -> None:
        for member in self.members:
            member.delete(lfn)

    def scan(self) -> Iterator[HeldFile]:
        for member in self.members:
            yield from member.scan()

    def clean_temporaries(self) -> int:
        return sum(m.clean_temporaries() for m in self.members)

    def branches(self) -> list[str]:
        return [b for m in self.members for b in m.branches()]

    def devices(self) -> list[CacheDevice]:
        return [d for m in self.members for d in m.devices()]

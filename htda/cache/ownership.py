"""Who may read a copy: the source's owner, group and mode, carried over to the device and the view.

A cached copy must never let anyone read (or list) what storage denies them.
POSIX storage tells its owners and modes; every directory on the way to the
file is mirrored too, because a union view shows the cache branch's
directories over storage's.  XRootD and HTTP files have no local owner, so a
site rule (``cache.remote_*``) applies to them; its default lets only root in.
"""

from __future__ import annotations

import grp
import os
import pwd
import stat as statmod
from dataclasses import dataclass

from .confine import parent_beneath

__all__ = ["Perms", "Ownership", "RemoteRule", "PRIVATE", "PRIVATE_DIR", "dir_perms", "parse_mode", "account_id"]

#: never carried over to a copy (nor to the symlink view's directories): set-id bits (a set-id file on a local
#: disk could run where storage is mounted nosuid) and write bits (copies are read-only, writes go to storage)
_DROPPED = statmod.S_ISUID | statmod.S_ISGID | 0o222


@dataclass(frozen=True)
class Perms:
    """Owner, group and permission bits of one file or directory."""

    uid: int
    gid: int
    mode: int

    @classmethod
    def of(cls, st: os.stat_result) -> "Perms":
        return cls(st.st_uid, st.st_gid, statmod.S_IMODE(st.st_mode))

    def read_only(self) -> "Perms":
        """These perms without write and set-id bits."""
        return Perms(self.uid, self.gid, self.mode & ~_DROPPED)

    def apply(self, fd: int) -> None:
        """Give the open file ``fd`` these perms (only what differs: its ctime stays when nothing does).

        A node that is not root cannot give files away: they stay its own, without group permissions (its
        group is not theirs), and it keeps writing in its own directories."""
        st = os.fstat(fd)
        mode = self.mode
        if (st.st_uid, st.st_gid) != (self.uid, self.gid):
            try:
                os.fchown(fd, self.uid, self.gid)  # before the chmod: chown clears set-id bits
            except PermissionError:
                if os.geteuid() == 0:
                    raise
                mode &= ~0o070
            st = os.fstat(fd)
        if os.geteuid() != 0 and statmod.S_ISDIR(st.st_mode):
            mode |= 0o700
        if statmod.S_IMODE(st.st_mode) != mode:
            os.fchmod(fd, mode)

    def apply_to_dir(self, path: str) -> None:
        """:meth:`apply` to the directory ``path``."""
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            self.apply(fd)
        finally:
            os.close(fd)


#: a temporary file, and anything HTDA knows no owner for: root alone
PRIVATE = Perms(0, 0, 0o600)
PRIVATE_DIR = Perms(0, 0, 0o700)


@dataclass(frozen=True)
class Ownership:
    """Perms of a source file and of the directories on its way: ``dirs[0]`` the storage root (None: leave
    the device's root as it is), then one per directory segment of the LFN."""

    file: Perms
    dirs: tuple[Perms | None, ...]

    @classmethod
    def private(cls) -> "Ownership":
        """Root alone may read (what a copy gets when nobody says otherwise)."""
        return cls(PRIVATE, (None,))

    def dir_perms(self, depth: int) -> Perms | None:
        return self.dirs[depth] if depth < len(self.dirs) else PRIVATE_DIR

    def read_only(self) -> "Ownership":
        """This ownership without write and set-id bits anywhere."""
        return Ownership(self.file.read_only(), tuple(d and d.read_only() for d in self.dirs))

    def apply_dir(self, depth: int, fd: int) -> None:
        """A :data:`htda.cache.confine.Visit`: give the directory at ``depth`` its source's perms."""
        perms = self.dir_perms(depth)
        if perms is not None and perms.mode & statmod.S_ISVTX:
            # in a sticky directory others may add names, but not replace what storage holds; a copy of it lacks
            # most names storage has, and what others added there would be shown in front of storage's files
            perms = Perms(perms.uid, perms.gid, perms.mode & ~0o022)
        if perms is not None:
            perms.apply(fd)


@dataclass(frozen=True)
class RemoteRule:
    """What copies of XRootD and HTTP files get (``cache.remote_*``): one owner, group and mode for all."""

    uid: int = 0
    gid: int = 0
    file_mode: int = 0o600
    dir_mode: int = 0o700

    def ownership(self, depth: int) -> Ownership:
        """Ownership of a file ``depth`` directories below the root; the root itself is left alone."""
        folder = Perms(self.uid, self.gid, self.dir_mode)
        return Ownership(Perms(self.uid, self.gid, self.file_mode), (None, *[folder] * depth))


def dir_perms(root: str, lfn: str) -> list[Perms]:
    """Perms of ``root`` and of the LFN's directories beneath it, as far down as they exist (no link followed)."""
    found: list[Perms] = []
    try:
        with parent_beneath(root, lfn, visit=lambda depth, fd: found.append(Perms.of(os.fstat(fd)))):
            pass
    except (OSError, ValueError):
        pass  # missing from here down
    return found


def parse_mode(value: str) -> int:
    """An octal permission mode such as ``"0640"`` or ``"0o640"`` (ValueError if not one, or with set-id bits)."""
    text = value.strip().lower().removeprefix("0o")
    if not text or any(c not in "01234567" for c in text):
        raise ValueError(f"{value!r} is not an octal mode such as \"0640\"")
    mode = int(text, 8)
    if mode > 0o777:
        raise ValueError(f"{value!r}: only permission bits (at most 0777), no set-id or sticky bits")
    return mode


def account_id(value: str, group: bool = False) -> int:
    """The uid (or gid) of a user (group) name or number known to this host (KeyError if unknown)."""
    if value.isdigit():
        (grp.getgrgid if group else pwd.getpwuid)(int(value))
        return int(value)
    return grp.getgrnam(value).gr_gid if group else pwd.getpwnam(value).pw_uid

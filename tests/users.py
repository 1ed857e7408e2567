"""Real unprivileged accounts for the multi-user tests (a site's two ordinary users).

The tests run as root; they create ``usera`` and ``userb`` (system accounts
without a login shell or home) once per machine and run commands as them with
``setpriv``, so every permission check is the kernel's, not a reading of
HTDA's code.  Where the tests cannot create accounts (not root), the tests
that need them are skipped with one line saying why.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pwd
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

__all__ = ["User", "ensure_user", "remove_user", "run_as", "users_or_skip"]

NAMES = ("usera", "userb")
_LOCK = Path("/run/htda-test-users.lock")


@dataclass(frozen=True)
class User:
    """An ordinary account the tests act as."""

    name: str
    uid: int
    gid: int


@contextlib.contextmanager
def _accounts_locked() -> Iterator[None]:
    """useradd and userdel take /etc/passwd's lock and fail if it is held: parallel test workers queue here."""
    with open(_LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def ensure_user(name: str) -> User:
    """The account ``name``, created (no home, no login) if missing; refuses root-equivalent accounts."""
    with _accounts_locked():
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            subprocess.run(["useradd", "--system", "--user-group", "--no-create-home",
                            "--shell", "/usr/sbin/nologin", name], check=True, capture_output=True)
            entry = pwd.getpwnam(name)
    if entry.pw_uid == 0 or entry.pw_gid == 0:
        raise RuntimeError(f"account {name} is root-equivalent; jobs and the multi-user tests need an ordinary one")
    return User(name, entry.pw_uid, entry.pw_gid)


def remove_user(name: str) -> None:
    """Delete the account ``name`` if it exists (its uid may then be given to a new account)."""
    with _accounts_locked():
        done = subprocess.run(["userdel", name], capture_output=True, text=True)
    if done.returncode not in (0, 6):  # 6: there was no such account
        raise RuntimeError(f"userdel {name}: exit {done.returncode}: {done.stderr.strip()}")


def run_as(user: User, argv: list[str], reach_as_root: bool = False, **kwargs) -> subprocess.CompletedProcess:
    """Run ``argv`` as ``user`` (its own group only, no capabilities); output captured as text.

    ``reach_as_root``: ``argv[0]`` may be a program only root can reach (the test interpreter, whose venv
    points below /root); it still runs as ``user`` from its first instruction on."""
    kwargs.setdefault("capture_output", True)
    kwargs.setdefault("text", True)
    kwargs.setdefault("timeout", 60)
    # setpriv execs its first program before the kernel has taken root's rights away for good, so the shell
    # goes first: the program itself is exec'd by the user alone (a path the user cannot reach fails).
    shell = [] if reach_as_root else ["/bin/sh", "-c", 'exec "$@"', "sh"]
    cmd = ["setpriv", f"--reuid={user.uid}", f"--regid={user.gid}", "--clear-groups",
           "--inh-caps=-all", "--bounding-set=-all", "--", *shell, *argv]
    return subprocess.run(cmd, **kwargs)


def users_or_skip() -> tuple[User, User]:
    """(usera, userb), or skip the test where accounts cannot be made."""
    if os.geteuid() != 0:
        pytest.skip("multi-user tests need root to create the accounts usera and userb")
    return ensure_user(NAMES[0]), ensure_user(NAMES[1])

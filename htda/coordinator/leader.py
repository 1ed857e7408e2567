"""Which of several coordinators on one database leads: a lock the database (or the OS) holds for us.

A site that runs two coordinators for availability points both at the same
database.  Only one may rate and place at a time (two would hand cache
nodes two different lists), so each holds out for a lock that the engine
releases by itself when its holder dies, even by ``kill -9``:

- PostgreSQL: a session-level advisory lock (``pg_try_advisory_lock``) on a
  connection of its own; the server drops it when that connection ends.
- SQLite: an exclusive ``flock`` on a file beside the database; the kernel
  drops it with the process.

The standby polls the lock; the one that takes it loads the database and
serves.  Everything a coordinator acknowledges is committed first, so a
takeover loses no acknowledged job.  A leader whose lock connection breaks
steps down (its lock may already be someone else's).
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
from abc import ABC, abstractmethod

import sqlalchemy as sa
from sqlalchemy.pool import NullPool

__all__ = ["Leadership", "PostgresLeadership", "FileLeadership", "leadership_for"]

log = logging.getLogger("htda.coordinator.leader")


class Leadership(ABC):
    """The lock that makes one coordinator of a database the leader."""

    @abstractmethod
    def try_acquire(self) -> bool:
        """Take the lock if it is free; True while this process holds it (idempotent)."""

    @abstractmethod
    def held(self) -> bool:
        """True while the lock is still ours (checks the connection that holds it)."""

    @abstractmethod
    def release(self) -> None:
        """Give the lock up (on a clean stop)."""

    @abstractmethod
    def describe(self) -> str:
        """What the lock is, for logs."""


def lock_key(name: str) -> int:
    """A stable signed 64-bit advisory-lock key for ``name``."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)


class PostgresLeadership(Leadership):
    """A PostgreSQL session-level advisory lock on a dedicated connection."""

    def __init__(self, url: sa.URL | str, schema: str | None):
        self.engine = sa.create_engine(url, poolclass=NullPool)
        self.name = f"htda-coordinator:{schema or 'public'}"
        self.key = lock_key(self.name)
        self._conn: sa.Connection | None = None

    def try_acquire(self) -> bool:
        if self._conn is not None:
            return self.held()
        try:
            conn = self.engine.connect()
            got = bool(conn.execute(sa.text("SELECT pg_try_advisory_lock(:k)"), {"k": self.key}).scalar())
            conn.commit()
        except sa.exc.SQLAlchemyError as exc:
            log.warning("cannot ask the database for the leader lock: %s", exc)
            return False
        if got:
            self._conn = conn
        else:
            conn.close()
        return got

    def held(self) -> bool:
        if self._conn is None:
            return False
        try:
            self._conn.execute(sa.text("SELECT 1")).scalar()
            self._conn.commit()
            return True
        except sa.exc.SQLAlchemyError as exc:
            log.error("the connection holding the leader lock broke: %s", exc)
            self._drop()
            return False

    def release(self) -> None:
        if self._conn is not None:
            try:
                self._conn.execute(sa.text("SELECT pg_advisory_unlock(:k)"), {"k": self.key})
                self._conn.commit()
            except sa.exc.SQLAlchemyError:
                pass  # closing the connection drops it anyway
            self._drop()
        self.engine.dispose()

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except sa.exc.SQLAlchemyError:
                pass

    def describe(self) -> str:
        return f"PostgreSQL advisory lock {self.key} ({self.name})"


class FileLeadership(Leadership):
    """An exclusive ``flock`` on a file (SQLite databases, which have no advisory locks)."""

    def __init__(self, path: str):
        self.path = path
        self._fd: int | None = None

    def try_acquire(self) -> bool:
        if self._fd is not None:
            return True
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self._fd = fd
        return True

    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing drops the flock
            self._fd = None

    def describe(self) -> str:
        return f"flock on {self.path}"


def leadership_for(url: sa.URL, schema: str | None) -> Leadership | None:
    """The lock for a database URL: PostgreSQL's advisory lock, a file lock beside a SQLite file, None for an
    in-memory SQLite database (nothing else can share it)."""
    if url.get_backend_name() == "postgresql":
        return PostgresLeadership(url, schema)
    if url.get_backend_name() == "sqlite" and url.database and url.database != ":memory:":
        return FileLeadership(url.database + ".leader")
    return None

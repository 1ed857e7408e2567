"""The coordinator's data model (SQLAlchemy 2.x declarative tables).

Tables
    ``htda_meta``          key/value: the work-cycle counter (and ``schema_version`` 1 in databases made before
                           Alembic)
    ``htda_jobs``          one row per job (``job_id`` unique): owner, task, cpus, memory, submit/start/end time,
                           state, the node it ran on, its input group and task group
    ``htda_files``         one row per LFN: size and mtime when known; unique on ``key``, the SHA-1 of the LFN
                           (an LFN may be longer than a database index entry may be)
    ``htda_groups``        sets of files requested together: ``job:<hash of the sorted inputs>`` (one job's
                           inputs; jobs with the same inputs share it) and ``task:<task id>`` (the union of the
                           inputs of a task's jobs)
    ``htda_group_files``   group membership
    ``htda_job_events``    state changes, unique on (job, state): the same report twice counts once.  A
                           ``started`` event is the access of each input of the job: the accesses of a file are
                           the started jobs whose input group holds it (stored once per job, not per file, which
                           keeps the bulk ingest fast; ``Store.file_history`` joins them)
    ``htda_nodes``         cache nodes seen: capacity reports, last seen, draining flag
    ``htda_assignments``   the current placement: which node should hold which file, since which cycle
    ``htda_releases``      files a node gave back (not placed there again until the release expires)
    ``htda_pins``          files an administrator pinned: always placed first, never displaced

Versioning: every change of these classes gets an Alembic revision in
:mod:`htda.coordinator.migrations` (``python -m htda.coordinator.migrations
revision -m ...``; ``... check`` fails while the model and the revisions
differ, and a test runs it).
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Boolean, Float, ForeignKey, Integer, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

__all__ = [
    "Assignment", "Base", "File", "Group", "GroupFile", "Job", "JobEvent",
    "Meta", "NodeRow", "Pin", "Release",
]

class Base(DeclarativeBase):
    """Declarative base of the coordinator's tables."""


class Meta(Base):
    """Key/value facts about the database itself."""

    __tablename__ = "htda_meta"
    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(String(255))


class File(Base):
    """A logical file."""

    __tablename__ = "htda_files"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    key: Mapped[str] = mapped_column(String(40), unique=True)
    lfn: Mapped[str] = mapped_column(Text)
    size: Mapped[int | None] = mapped_column(BigInteger)
    mtime: Mapped[float | None] = mapped_column(Float)


class Group(Base):
    """A set of files requested together (``kind`` is ``job`` or ``task``)."""

    __tablename__ = "htda_groups"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(512), unique=True)
    kind: Mapped[str] = mapped_column(String(8))
    #: a job group's file sizes as last written, hashed (``store.sizes_digest``): a job of the group bringing the
    #: same sizes needs no lookup of its files; None until a job brought sizes
    sizes_digest: Mapped[int | None] = mapped_column(BigInteger)


class GroupFile(Base):
    """Membership of a file in a group."""

    __tablename__ = "htda_group_files"
    group_id: Mapped[int] = mapped_column(ForeignKey("htda_groups.id"), primary_key=True)
    file_id: Mapped[int] = mapped_column(ForeignKey("htda_files.id"), primary_key=True, index=True)


class Job(Base):
    """A batch job as the hooks reported it."""

    __tablename__ = "htda_jobs"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[str] = mapped_column(String(255), unique=True)
    owner: Mapped[str] = mapped_column(String(255))
    task: Mapped[str | None] = mapped_column(String(255))
    cpus: Mapped[int | None] = mapped_column(Integer)
    memory: Mapped[int | None] = mapped_column(Integer)
    submit_time: Mapped[float | None] = mapped_column(Float)
    start_time: Mapped[float | None] = mapped_column(Float)
    end_time: Mapped[float | None] = mapped_column(Float)
    state: Mapped[str] = mapped_column(String(16), default="submitted")
    node: Mapped[str | None] = mapped_column(String(255))
    # No foreign keys to htda_groups: checking them cost PostgreSQL more than the rest of a job row's insert,
    # and the coordinator writes a job's groups with the job and never deletes one (revision 0002).
    input_group_id: Mapped[int] = mapped_column(Integer, index=True)
    task_group_id: Mapped[int | None] = mapped_column(Integer)


class JobEvent(Base):
    """One state change of a job; (job, state) is unique."""

    __tablename__ = "htda_job_events"
    job: Mapped[int] = mapped_column(ForeignKey("htda_jobs.id"), primary_key=True)
    state: Mapped[str] = mapped_column(String(16), primary_key=True)
    time: Mapped[float] = mapped_column(Float)
    node: Mapped[str | None] = mapped_column(String(255))


class NodeRow(Base):
    """A cache node as the coordinator last saw it."""

    __tablename__ = "htda_nodes"
    name: Mapped[str] = mapped_column(String(255), primary_key=True)
    url: Mapped[str | None] = mapped_column(Text)
    capacity_bytes: Mapped[int | None] = mapped_column(BigInteger)
    free_bytes: Mapped[int | None] = mapped_column(BigInteger)
    last_seen: Mapped[float | None] = mapped_column(Float)
    draining: Mapped[bool] = mapped_column(Boolean, default=False)


class Assignment(Base):
    """The current placement of one file."""

    __tablename__ = "htda_assignments"
    file_id: Mapped[int] = mapped_column(ForeignKey("htda_files.id"), primary_key=True)
    node: Mapped[str] = mapped_column(String(255), index=True)
    cycle: Mapped[int] = mapped_column(Integer)


class Release(Base):
    """A file a node gave back; it is not placed on that node again before ``until``."""

    __tablename__ = "htda_releases"
    file_id: Mapped[int] = mapped_column(ForeignKey("htda_files.id"), primary_key=True)
    node: Mapped[str] = mapped_column(String(255), primary_key=True)
    until: Mapped[float] = mapped_column(Float)
    reason: Mapped[str | None] = mapped_column(String(255))


class Pin(Base):
    """A file an administrator wants cached whatever its score."""

    __tablename__ = "htda_pins"
    file_id: Mapped[int] = mapped_column(ForeignKey("htda_files.id"), primary_key=True)

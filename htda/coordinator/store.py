"""The coordinator's store: every database access, with SQLAlchemy Core on the tables of :mod:`.model`.

One :class:`Store` per coordinator.  Writes are bulk (executemany, one
transaction per request) and serialised by a lock, so concurrent requests
never fight over SQLite's single writer; duplicates from a racing second
coordinator on the same PostgreSQL database are absorbed by
``ON CONFLICT DO NOTHING``.  SQLite runs in WAL mode.
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import logging
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Table, bindparam, case, create_engine, delete, event, func, insert, select, text, update
from sqlalchemy.engine import URL, Connection, Engine, make_url
from sqlalchemy.sql import Select

from ..node.clock import SYSTEM_CLOCK, Clock
from ..protocol.coordinator import inputs_digest
from . import migrations
from .leader import lock_key
from .migrations import SchemaVersionError
from .model import (
    Assignment,
    Base,
    File,
    Group,
    GroupFile,
    Job,
    JobEvent,
    Meta,
    NodeRow,
    Pin,
    Release,
)

__all__ = ["EventResult", "IngestResult", "JobRecord", "SchemaVersionError", "Store", "file_key", "group_name",
           "sizes_digest"]

log = logging.getLogger("htda.coordinator.store")

CHUNK = 2000  # values per IN (...) list: well under SQLite's and PostgreSQL's limits

# COPY's text format: a backslash escapes these (NULL is \N)
_COPY_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})



def _table(model: type[Base]) -> Table:
    """The table of a model: its ``__table__``, which SQLAlchemy types as any FROM clause (a mapping may be of a
    join); the metadata's table of the same name is that object, typed as the ``Table`` it is."""
    return Base.metadata.tables[model.__tablename__]


T_FILES, T_GROUPS, T_MEMBERS = _table(File), _table(Group), _table(GroupFile)
T_JOBS, T_EVENTS = _table(Job), _table(JobEvent)
T_NODES, T_ASSIGN, T_RELEASES, T_META = _table(NodeRow), _table(Assignment), _table(Release), _table(Meta)
T_PINS = _table(Pin)


@dataclass
class JobRecord:
    """A job as the hooks report it (LFNs already normalised)."""

    job_id: str
    owner: str
    inputs: list[str]
    cpus: int | None = None
    memory: int | None = None
    submit_time: float | None = None
    task: str | None = None
    sizes: dict[str, int] = field(default_factory=dict)
    input_group: str = field(init=False)  # the name of the group of its inputs

    def __post_init__(self) -> None:
        self.input_group = group_name(self.inputs)


@dataclass
class IngestResult:
    """What one bulk job submission changed."""

    accepted: int = 0
    duplicates: int = 0
    files: dict[int, tuple[str, int | None]] = field(default_factory=dict)  # id -> (lfn, size), new or resized
    members: list[tuple[int, int]] = field(default_factory=list)  # (group id, file id), possibly known already
    accesses: list[tuple[int, int | None, float]] = field(default_factory=list)  # with access_on="submit"


@dataclass
class EventResult:
    """What one bulk event report changed."""

    accepted: int = 0
    duplicates: int = 0
    unknown: int = 0
    refused: int = 0  # events that name an owner other than the job's (a user reporting another's job)
    accesses: list[tuple[int, int | None, float]] = field(default_factory=list)  # (input group, task group, t)


def file_key(lfn: str) -> str:
    """The unique key of an LFN in the database (LFNs may outgrow an index entry)."""
    return hashlib.sha1(lfn.encode("utf-8", "surrogatepass")).hexdigest()


def group_name(inputs: Iterable[str]) -> str:
    """The name of the group of one job's inputs: jobs reading the same files share it."""
    return f"job:{inputs_digest(inputs)}"


def _batch_sizes(jobs: Sequence[JobRecord]) -> dict[str, int | None]:
    """Every input of ``jobs`` with the size the latest job that gave one gave (None: none did)."""
    sizes: dict[str, int | None] = {}
    for job in jobs:
        for lfn in job.inputs:
            size = job.sizes.get(lfn)
            if size is not None or lfn not in sizes:
                sizes[lfn] = size
    return sizes


def sizes_digest(inputs: Iterable[str], sizes: Mapping[str, int | None]) -> int | None:
    """The sizes of a job group's files in the order of their sorted LFNs, hashed to a signed 64-bit number
    (the group's name already names the LFNs); None when a size is not known."""
    known = [sizes.get(lfn) for lfn in sorted(set(inputs))]
    if None in known:
        return None
    digest = hashlib.blake2b(",".join(map(str, known)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def _stale(digest: int | None, written: int | None) -> bool:
    """Whether a job's sizes (their ``digest``) may differ from those ``written`` for its group."""
    return digest is None or digest != written


def _chunks(values: Sequence[Any], size: int = CHUNK) -> Iterator[Sequence[Any]]:
    for start in range(0, len(values), size):
        yield values[start:start + size]


ACCESS_ON = ("start", "submit")


class Store:
    """The coordinator's database: ``url`` is any SQLAlchemy URL; ``schema`` a PostgreSQL schema to use.

    ``access_on`` says which record counts as one access of each input of a job: its ``started``
    event (when the hooks see jobs start), or its submission (when they cannot: HTCondor's job
    router runs no update or finalize hook for jobs it edits in place).
    """

    def __init__(self, url: str, schema: str | None = None, access_on: str = "start", clock: Clock = SYSTEM_CLOCK):
        if access_on not in ACCESS_ON:
            raise ValueError(f"access_on must be one of {ACCESS_ON}")
        self.access_on = access_on
        self.clock = clock  # stamps jobs recorded without a submit time
        self.url = url
        parsed = with_driver(url)
        options = {"executemany_mode": "values_plus_batch"} if parsed.drivername.endswith("psycopg2") else {}
        self.engine: Engine = create_engine(parsed, pool_pre_ping=True, **options)
        self.dialect = self.engine.dialect.name
        self._copy = parsed.drivername.endswith("psycopg2")  # bulk inserts by COPY (see _insert_many)
        if self.dialect == "sqlite":
            event.listen(self.engine, "connect", _sqlite_pragmas)
        if schema:
            with self.engine.begin() as conn:
                self._one_migrator(conn, schema)
                conn.execute(text(f'CREATE SCHEMA IF NOT EXISTS "{schema}"'))
            self.engine = self.engine.execution_options(schema_translate_map={None: schema})
        self.schema = schema
        self._write = threading.Lock()  # one write transaction at a time (SQLite's single writer); reads skip it
        self.migrate()

    def close(self) -> None:
        self.engine.dispose()

    # -- schema ------------------------------------------------------------------
    def migrate(self) -> str:
        """Create the tables of a new database, or upgrade an older one (:mod:`.migrations`); return the
        schema revision."""
        with self._write, self.engine.begin() as conn:
            self._one_migrator(conn, self.schema)
            revision = migrations.upgrade(conn, self.schema)
            conn.execute(self._insert_ignore(T_META), [{"key": "cycle", "value": "0"}])
        return revision

    def _one_migrator(self, conn: Connection, schema: str | None) -> None:
        """Two coordinators starting together on one PostgreSQL schema create and upgrade it one after the
        other: a transaction-level advisory lock (SQLite's writer lock does the same there)."""
        if self.dialect == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": lock_key(f"htda-migrate:{schema}")})

    def _set_meta(self, conn: Connection, key: str, value: str) -> None:
        conn.execute(update(T_META).where(T_META.c.key == key).values(value=value))

    def schema_version(self) -> str | None:
        """The Alembic revision the database is at."""
        with self.engine.connect() as conn:
            return migrations.current(conn, self.schema)

    def _insert_ignore(self, table):
        """INSERT that skips rows whose unique key exists (races between requests or coordinators)."""
        if self.dialect == "postgresql":
            from sqlalchemy.dialects.postgresql import insert as pg_insert

            return pg_insert(table).on_conflict_do_nothing()
        if self.dialect == "sqlite":
            from sqlalchemy.dialects.sqlite import insert as sqlite_insert

            return sqlite_insert(table).on_conflict_do_nothing()
        return insert(table)

    def _insert_many(self, conn: Connection, table: Table, rows: list[dict[str, Any]]) -> None:
        """Plain INSERT of many rows (all with the same keys); a COPY on PostgreSQL through psycopg2: the server
        then parses no statement of thousands of values (1,000 job rows: 23 instead of 39 ms)."""
        if not self._copy:
            conn.execute(insert(table), rows)
            return
        columns = list(rows[0])
        data = "".join("\t".join([_copy_value(row[column]) for column in columns]) + "\n" for row in rows)
        name = f'"{self.schema}".{table.name}' if self.schema else table.name
        cursor = conn.connection.cursor()
        try:
            cursor.copy_expert(f"COPY {name} ({', '.join(columns)}) FROM STDIN", io.StringIO(data))
        finally:
            cursor.close()

    def _select_in(self, conn: Connection, columns: Sequence[Any], key_column: Any, values: Iterable[Any]):
        values = list(values)
        for chunk in _chunks(values):
            yield from conn.execute(select(*columns).where(key_column.in_(chunk)))

    # -- jobs --------------------------------------------------------------------------
    def ingest_jobs(self, jobs: Sequence[JobRecord]) -> IngestResult:
        """Record new jobs with their files and groups; jobs whose ``job_id`` is known count as duplicates."""
        result = IngestResult()
        unique: dict[str, JobRecord] = {}
        for job in jobs:
            unique.setdefault(job.job_id, job)
        result.duplicates = len(jobs) - len(unique)
        now = self.clock.time()
        with self._write, self.engine.begin() as conn:
            known = {row[0] for row in self._select_in(conn, [T_JOBS.c.job_id], T_JOBS.c.job_id, unique)}
            new = [job for job_id, job in unique.items() if job_id not in known]
            result.duplicates += len(known)
            if not new:
                return result
            sizes = _batch_sizes(new)
            group_ids, created, digests = self._ensure_groups(conn, new, sizes)
            # A known input group's files and members were written with it: only the jobs of a new group, of a
            # task (its group takes the union of its jobs' inputs) or with sizes other than those last written
            # for their group need their files' rows (five index probes a job, most of a bulk ingest's database
            # time on millions of files).
            looked_up = [job for job in new if group_ids[job.input_group] in created or job.task
                         or (job.sizes and _stale(sizes_digest(job.inputs, sizes),
                                                  digests[group_ids[job.input_group]]))]
            file_ids, final = self._file_rows(conn, {lfn: sizes[lfn] for job in looked_up for lfn in job.inputs},
                                              result)
            self._save_digests(conn, [job for job in looked_up if job.sizes], group_ids, digests, final)
            members: set[tuple[int, int]] = set()
            for job in new:
                input_group = group_ids[job.input_group]
                if input_group in created:
                    members.update((input_group, file_ids[lfn]) for lfn in job.inputs)
                if job.task:
                    members.update((group_ids[f"task:{job.task}"], file_ids[lfn]) for lfn in job.inputs)
            if members:
                conn.execute(self._insert_ignore(T_MEMBERS), [{"group_id": g, "file_id": f} for g, f in members])
            rows: list[dict[str, Any]] = [{
                "job_id": job.job_id, "owner": job.owner, "task": job.task, "cpus": job.cpus, "memory": job.memory,
                "submit_time": now if job.submit_time is None else job.submit_time, "state": "submitted",
                "input_group_id": group_ids[job.input_group],
                "task_group_id": group_ids[f"task:{job.task}"] if job.task else None,
            } for job in new]
            self._insert_many(conn, T_JOBS, rows)
            if self.access_on == "submit":
                result.accesses = [(r["input_group_id"], r["task_group_id"], r["submit_time"]) for r in rows]
            result.accepted = len(new)
            result.members = sorted(members)
        return result

    def _file_rows(self, conn: Connection, sizes: dict[str, int | None],
                   result: IngestResult) -> tuple[dict[str, int], dict[str, int | None]]:
        """(ids, sizes now) of the LFNs of ``sizes``: rows created where missing, sizes updated where known and
        changed."""
        keys = {file_key(lfn): lfn for lfn in sizes}
        ids: dict[str, int] = {}
        final = dict(sizes)
        resized = []
        for fid, key, size in self._select_in(conn, [T_FILES.c.id, T_FILES.c.key, T_FILES.c.size],
                                              T_FILES.c.key, keys):
            lfn = keys[key]
            ids[lfn] = fid
            if sizes[lfn] is None:
                final[lfn] = size
            elif sizes[lfn] != size:
                resized.append({"fid": fid, "new_size": sizes[lfn]})
                result.files[fid] = (lfn, sizes[lfn])
        missing = [key for key, lfn in keys.items() if lfn not in ids]
        if missing:
            conn.execute(self._insert_ignore(T_FILES),
                         [{"key": key, "lfn": keys[key], "size": sizes[keys[key]]} for key in missing])
            for fid, key in self._select_in(conn, [T_FILES.c.id, T_FILES.c.key], T_FILES.c.key, missing):
                ids[keys[key]] = fid
                result.files[fid] = (keys[key], sizes[keys[key]])
        if resized:
            conn.execute(update(T_FILES).where(T_FILES.c.id == bindparam("fid")).values(size=bindparam("new_size")),
                         resized)
        return ids, final

    def _save_digests(self, conn: Connection, jobs: Sequence[JobRecord], group_ids: dict[str, int],
                      digests: dict[int, int | None], sizes: dict[str, int | None]) -> None:
        """Remember the sizes now written for the input groups of ``jobs`` (their files' rows were looked up)."""
        changed = {}
        for job in jobs:
            gid, digest = group_ids[job.input_group], sizes_digest(job.inputs, sizes)
            if digest is not None and digests[gid] != digest:
                changed[gid] = digests[gid] = digest
        if changed:
            conn.execute(update(T_GROUPS).where(T_GROUPS.c.id == bindparam("gid"))
                         .values(sizes_digest=bindparam("digest")),
                         [{"gid": gid, "digest": digest} for gid, digest in changed.items()])

    def _ensure_groups(self, conn: Connection, jobs: Sequence[JobRecord],
                       sizes: dict[str, int | None]) -> tuple[dict[str, int], set[int], dict[int, int | None]]:
        """(group ids by name, the ids of the groups created now, each group's sizes digest)."""
        kinds = {job.input_group: "job" for job in jobs}
        kinds.update({f"task:{job.task}": "task" for job in jobs if job.task})
        ids, digests = {}, {}
        for gid, name, digest in self._select_in(conn, [T_GROUPS.c.id, T_GROUPS.c.name, T_GROUPS.c.sizes_digest],
                                                 T_GROUPS.c.name, kinds):
            ids[name], digests[gid] = gid, digest
        missing = [name for name in kinds if name not in ids]
        created: set[int] = set()
        if missing:
            # a new group's files get the batch's sizes: its digest is known before they are written
            fresh = {job.input_group: sizes_digest(job.inputs, sizes) for job in jobs if job.input_group in missing}
            conn.execute(self._insert_ignore(T_GROUPS), [{"name": name, "kind": kinds[name],
                                                          "sizes_digest": fresh.get(name)} for name in missing])
            for gid, name in self._select_in(conn, [T_GROUPS.c.id, T_GROUPS.c.name], T_GROUPS.c.name, missing):
                ids[name], digests[gid] = gid, fresh.get(name)
                created.add(gid)
        return ids, created, digests

    # -- events ------------------------------------------------------------------------
    def record_events(self, events: Sequence[dict[str, Any]]) -> EventResult:
        """Record job state changes; a new ``started`` event records one access of each input of the job.

        An event that names an ``owner`` counts only for a job of that owner (the first record of a job id
        keeps its owner): a user cannot report another user's job by putting its id in an ad of their own."""
        result = EventResult()
        unique: dict[tuple[str, str], dict[str, Any]] = {}
        for ev in events:
            unique.setdefault((ev["job_id"], ev["state"]), ev)
        result.duplicates = len(events) - len(unique)
        with self._write, self.engine.begin() as conn:
            jobs = {row.job_id: row for row in self._select_in(
                conn, [T_JOBS.c.id, T_JOBS.c.job_id, T_JOBS.c.owner, T_JOBS.c.input_group_id, T_JOBS.c.task_group_id],
                T_JOBS.c.job_id, {job_id for job_id, _ in unique})}
            known = {(pk, state) for pk, state in self._select_in(
                conn, [T_EVENTS.c.job, T_EVENTS.c.state], T_EVENTS.c.job, [row.id for row in jobs.values()])}
            fresh = []
            for (job_id, state), ev in unique.items():
                row = jobs.get(job_id)
                if row is None:
                    result.unknown += 1
                elif ev.get("owner") not in (None, row.owner):
                    result.refused += 1
                elif (row.id, state) in known:
                    result.duplicates += 1
                else:
                    fresh.append((row, ev))
            if fresh:
                conn.execute(self._insert_ignore(T_EVENTS), [
                    {"job": row.id, "state": ev["state"], "time": ev["time"], "node": ev.get("node")}
                    for row, ev in fresh])
                self._apply_states(conn, fresh)
                if self.access_on == "start":
                    # The started event itself is the record of the accesses (see the model).
                    result.accesses = [(row.input_group_id, row.task_group_id, ev["time"])
                                       for row, ev in fresh if ev["state"] == "started"]
            result.accepted = len(fresh)
        return result

    def _apply_states(self, conn: Connection, fresh: list[tuple[Any, dict[str, Any]]]) -> None:
        started = [{"pk": row.id, "t": ev["time"], "where": ev.get("node")}
                   for row, ev in fresh if ev["state"] == "started"]
        ended = [{"pk": row.id, "t": ev["time"], "new_state": ev["state"]}
                 for row, ev in fresh if ev["state"] != "started"]
        if started:
            conn.execute(update(T_JOBS).where(T_JOBS.c.id == bindparam("pk")).values(
                start_time=bindparam("t"), node=func.coalesce(bindparam("where"), T_JOBS.c.node),
                state=case((T_JOBS.c.state == "submitted", "started"), else_=T_JOBS.c.state)), started)
        if ended:
            conn.execute(update(T_JOBS).where(T_JOBS.c.id == bindparam("pk")).values(
                end_time=bindparam("t"), state=bindparam("new_state")), ended)

    # -- releases, nodes, placement ---------------------------------------------------------------
    def file_ids(self, lfns: Iterable[str]) -> dict[str, int]:
        """Ids of the known LFNs among ``lfns``."""
        with self.engine.connect() as conn:
            return self._known_ids(conn, lfns)

    def latest_input_groups(self, file_ids: Iterable[int]) -> dict[int, int]:
        """Per file, the input group of the latest job that named it (the job most likely reading it now)."""
        out = {}
        with self.engine.connect() as conn:
            for fid in sorted(set(file_ids)):
                gid = conn.execute(select(T_JOBS.c.input_group_id).where(_names_file(fid))
                                   .order_by(T_JOBS.c.id.desc()).limit(1)).scalar()
                if gid is not None:
                    out[fid] = gid
        return out

    def jobs_per_input_group(self, group_ids: Iterable[int]) -> dict[int, int]:
        """How many jobs named each of these input groups."""
        out: dict[int, int] = {}
        with self.engine.connect() as conn:
            for chunk in _chunks(sorted(set(group_ids))):
                out.update(conn.execute(select(T_JOBS.c.input_group_id, func.count())
                                        .where(T_JOBS.c.input_group_id.in_(chunk))
                                        .group_by(T_JOBS.c.input_group_id)).all())
        return out

    def add_releases(self, node: str, file_ids: Iterable[int], until: float, reason: str | None) -> None:
        ids = sorted(set(file_ids))
        if not ids:
            return
        with self._write, self.engine.begin() as conn:
            for chunk in _chunks(ids):
                conn.execute(delete(T_RELEASES).where(T_RELEASES.c.node == node, T_RELEASES.c.file_id.in_(chunk)))
            conn.execute(insert(T_RELEASES), [{"file_id": fid, "node": node, "until": until,
                                               "reason": (reason or "")[:255] or None} for fid in ids])

    def releases(self, now: float) -> dict[int, set[str]]:
        """The releases still in force at ``now`` (expired ones are deleted)."""
        with self._write, self.engine.begin() as conn:
            conn.execute(delete(T_RELEASES).where(T_RELEASES.c.until <= now))
            out: dict[int, set[str]] = {}
            for fid, node in conn.execute(select(T_RELEASES.c.file_id, T_RELEASES.c.node)):
                out.setdefault(fid, set()).add(node)
            return out

    def set_pins(self, lfns: Sequence[str], group_names: Sequence[str], pin: bool) -> tuple[IngestResult, set[int],
                                                                                          list[str]]:
        """Pin (or unpin) files by LFN and by group name.  Unknown LFNs are recorded when pinned; returns the
        new file rows, the ids of every file named, and the group names that are not known."""
        result = IngestResult()
        with self._write, self.engine.begin() as conn:
            ids = set((self._file_rows(conn, dict.fromkeys(lfns), result)[0] if pin else self._known_ids(conn, lfns))
                      .values())
            groups = dict(self._select_in(conn, [T_GROUPS.c.name, T_GROUPS.c.id], T_GROUPS.c.name, group_names))
            ids.update(fid for (fid,) in self._select_in(conn, [T_MEMBERS.c.file_id], T_MEMBERS.c.group_id,
                                                         groups.values()))
            chosen = sorted(ids)
            for chunk in _chunks(chosen):
                conn.execute(delete(T_PINS).where(T_PINS.c.file_id.in_(chunk)))
            if pin and chosen:
                conn.execute(insert(T_PINS), [{"file_id": fid} for fid in chosen])
        return result, ids, [name for name in group_names if name not in groups]

    def _known_ids(self, conn: Connection, lfns: Iterable[str]) -> dict[str, int]:
        keys = {file_key(lfn): lfn for lfn in lfns}
        return {keys[key]: fid for fid, key in self._select_in(conn, [T_FILES.c.id, T_FILES.c.key], T_FILES.c.key,
                                                               keys)}

    def pins(self) -> set[int]:
        with self.engine.connect() as conn:
            return set(conn.execute(select(T_PINS.c.file_id)).scalars())

    def clear_releases(self, node: str) -> None:
        with self._write, self.engine.begin() as conn:
            conn.execute(delete(T_RELEASES).where(T_RELEASES.c.node == node))

    def save_nodes(self, nodes: Sequence[dict[str, Any]]) -> None:
        """Upsert cache node reports: ``name``, ``url``, ``capacity_bytes``, ``free_bytes``, ``last_seen``."""
        if not nodes:
            return
        with self._write, self.engine.begin() as conn:
            known = {row[0] for row in self._select_in(conn, [T_NODES.c.name], T_NODES.c.name,
                                                       [n["name"] for n in nodes])}
            fresh = [n for n in nodes if n["name"] not in known]
            old = [{**n, "node_name": n["name"]} for n in nodes if n["name"] in known]
            if fresh:
                conn.execute(self._insert_ignore(T_NODES), [{**n, "draining": False} for n in fresh])
            if old:
                conn.execute(update(T_NODES).where(T_NODES.c.name == bindparam("node_name")).values(
                    url=bindparam("url"), capacity_bytes=bindparam("capacity_bytes"),
                    free_bytes=bindparam("free_bytes"), last_seen=bindparam("last_seen")), old)

    def set_draining(self, node: str, draining: bool) -> bool:
        """Mark a known cache node draining (its files are placed elsewhere); False if the node is unknown."""
        with self._write, self.engine.begin() as conn:
            done = conn.execute(update(T_NODES).where(T_NODES.c.name == node).values(draining=draining))
            return done.rowcount > 0

    def nodes(self) -> list[dict[str, Any]]:
        with self.engine.connect() as conn:
            return [dict(row._mapping) for row in conn.execute(select(T_NODES).order_by(T_NODES.c.name))]

    def save_placement(self, changes: dict[int, str | None], cycle: int) -> None:
        """Apply placement changes (``{file id: new node or None}``) and store the cycle counter."""
        with self._write, self.engine.begin() as conn:
            ids = sorted(changes)
            for chunk in _chunks(ids):
                conn.execute(delete(T_ASSIGN).where(T_ASSIGN.c.file_id.in_(chunk)))
            placed = [fid for fid in ids if changes[fid]]
            for chunk in _chunks(placed, 10_000):  # a row dict per file: a full placement's would be 100s of MB
                rows = [{"file_id": fid, "node": changes[fid], "cycle": cycle} for fid in chunk]
                conn.execute(insert(T_ASSIGN), rows)
            self._set_meta(conn, "cycle", str(cycle))

    # -- loading the state at start-up --------------------------------------------------
    def cycle(self) -> int:
        with self.engine.connect() as conn:
            return int(conn.execute(select(T_META.c.value).where(T_META.c.key == "cycle")).scalar_one())

    def _stream(self, query: Select) -> Iterator[Any]:
        """The rows of a large query, a batch at a time: the ``yield_per`` option streams them from a server-side
        cursor (PostgreSQL), where ``Result.yield_per`` alone would have the driver hold the whole result first
        (hundreds of MB at millions of rows, which the process keeps as RSS)."""
        with self.engine.connect() as conn:
            yield from conn.execution_options(yield_per=50_000).execute(query)

    def iter_files(self) -> Iterator[tuple[int, str, int | None]]:
        yield from self._stream(select(T_FILES.c.id, T_FILES.c.lfn, T_FILES.c.size))

    def iter_sizes(self) -> Iterator[tuple[int, int | None]]:
        """(id, size) of every file: what the rating state keeps of each (LFNs are read when needed)."""
        yield from self._stream(select(T_FILES.c.id, T_FILES.c.size))

    def max_file_id(self) -> int:
        """The largest file id (0 without files): the length of the state's per-file arrays."""
        with self.engine.connect() as conn:
            return conn.execute(select(func.max(T_FILES.c.id))).scalar() or 0

    def lfns(self, file_ids: Iterable[int]) -> dict[int, str]:
        """The LFNs of the known ids among ``file_ids``."""
        with self.engine.connect() as conn:
            return dict(self._select_in(conn, [T_FILES.c.id, T_FILES.c.lfn], T_FILES.c.id, file_ids))

    def iter_members(self) -> Iterator[tuple[int, int]]:
        yield from self._stream(select(T_MEMBERS.c.group_id, T_MEMBERS.c.file_id))

    def iter_accesses(self) -> Iterator[tuple[int, int | None, float]]:
        """(input group, task group, time) of every access: the access history of the groups."""
        if self.access_on == "submit":
            query = select(T_JOBS.c.input_group_id, T_JOBS.c.task_group_id, T_JOBS.c.submit_time)
        else:
            query = (select(T_JOBS.c.input_group_id, T_JOBS.c.task_group_id, T_EVENTS.c.time)
                     .join(T_JOBS, T_JOBS.c.id == T_EVENTS.c.job).where(T_EVENTS.c.state == "started"))
        yield from self._stream(query)

    def placement(self) -> dict[int, str]:
        with self.engine.connect() as conn:
            return dict(conn.execute(select(T_ASSIGN.c.file_id, T_ASSIGN.c.node)).all())

    # -- admin queries ---------------------------------------------------------------------
    def groups_info(self, group_ids: Iterable[int]) -> dict[int, dict[str, Any]]:
        with self.engine.connect() as conn:
            return {row.id: {"id": row.id, "name": row.name, "kind": row.kind}
                    for row in self._select_in(conn, [T_GROUPS.c.id, T_GROUPS.c.name, T_GROUPS.c.kind],
                                               T_GROUPS.c.id, group_ids)}

    def file_history(self, file_id: int, limit: int = 50) -> dict[str, Any]:
        """The accesses of one file (the jobs that read it, most recent first), their count, and its groups."""
        when = T_JOBS.c.submit_time if self.access_on == "submit" else T_JOBS.c.start_time
        with self.engine.connect() as conn:
            groups = conn.execute(_groups_holding(file_id)).scalars().all()
            readers = _names_file(file_id)
            accessed = when.is_not(None)
            total = conn.execute(select(func.count()).select_from(T_JOBS).where(readers, accessed)).scalar_one()
            recent = conn.execute(
                select(T_JOBS.c.job_id, T_JOBS.c.owner, T_JOBS.c.task, T_JOBS.c.state, T_JOBS.c.node,
                       when.label("time"))
                .where(readers, accessed).order_by(when.desc()).limit(limit)).all()
        return {"accesses": total, "recent": [dict(row._mapping) for row in recent], "groups": list(groups)}

    def counts(self) -> dict[str, int]:
        """Row counts of the main tables, and the number of file accesses (admin and metrics)."""
        tables = {"jobs": T_JOBS, "files": T_FILES, "groups": T_GROUPS, "assignments": T_ASSIGN}
        with self.engine.connect() as conn:
            out = {name: conn.execute(select(func.count()).select_from(t)).scalar_one() for name, t in tables.items()}
            out["accesses"] = conn.execute(accesses_query(self.access_on, func.count())).scalar_one()
        return out

    def drop_all(self) -> None:
        """Drop every table (and the schema, if one was given): for tests."""
        with self._write, self.engine.begin() as conn:
            Base.metadata.drop_all(conn)
        if self.schema:
            with self.engine.begin() as conn:
                conn.execute(text(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE'))


def _copy_value(value: Any) -> str:
    """One value in COPY's text format: NULL, an escaped string, or a number."""
    if value is None:
        return "\\N"
    if isinstance(value, str):
        return value.translate(_COPY_ESCAPES)
    return repr(value)


def accesses_query(access_on: str, *columns: Any) -> Select:
    """``columns`` of every access as the coordinator counts them: one row per (job record, or ``started``
    event, by ``access_on``) x (file of the job's input group)."""
    if access_on == "submit":
        return (select(*columns).select_from(T_JOBS)
                .join(T_MEMBERS, T_MEMBERS.c.group_id == T_JOBS.c.input_group_id)
                .where(T_JOBS.c.submit_time.is_not(None)))
    return (select(*columns).select_from(T_EVENTS).join(T_JOBS, T_JOBS.c.id == T_EVENTS.c.job)
            .join(T_MEMBERS, T_MEMBERS.c.group_id == T_JOBS.c.input_group_id)
            .where(T_EVENTS.c.state == "started"))


def _groups_holding(file_id: int):
    """The ids of the groups a file belongs to (a subquery)."""
    return select(T_MEMBERS.c.group_id).where(T_MEMBERS.c.file_id == file_id)


def _names_file(file_id: int):
    """The condition on jobs whose inputs include the file."""
    return T_JOBS.c.input_group_id.in_(_groups_holding(file_id))


def with_driver(url: str) -> URL:
    """``postgresql://`` names psycopg 3 in SQLAlchemy 2.1; use psycopg2 where only that is installed."""
    parsed = make_url(url)
    if parsed.drivername == "postgresql" and importlib.util.find_spec("psycopg") is None:
        parsed = parsed.set(drivername="postgresql+psycopg2")
    return parsed


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()

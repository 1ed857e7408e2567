"""The coordinator's own database as a trace: every recorded access, in time order.

A ``started`` event of a job (``htda_job_events``) is, as for the
coordinator, one access of each of the job's inputs (the files of its input
group): one request per input, at the event's time, sized by
``htda_files.size`` (``unknown_size`` where the size was never reported).
Its group is the job's task group when the job named a task, otherwise the
group of the job's inputs: the larger of the two groups the coordinator
rates the file by.  The rows are streamed from the
database in chunks (server-side where the driver supports it), so a long
history does not have to fit in memory.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from sqlalchemy import create_engine, func, make_url
from sqlalchemy.exc import SQLAlchemyError

from ..coordinator.model import File, GroupFile, Job, JobEvent
from ..coordinator.store import ACCESS_ON, accesses_query, with_driver
from ..units import MAX_BYTES
from . import DEFAULT_CHUNK
from .trace import Chunk, Interner

__all__ = ["HistoryTrace"]


class HistoryTrace:
    """Iterate the accesses of a coordinator database (any SQLAlchemy URL) as :class:`Chunk` objects."""

    has_groups = True

    def __init__(self, url: str, chunk_size: int = DEFAULT_CHUNK, unknown_size: int = 1 << 30,
                 schema: str | None = None, access_on: str = "submit"):
        if access_on not in ACCESS_ON:
            raise ValueError(f"access_on must be one of {', '.join(ACCESS_ON)}")
        self.url = url
        self.access_on = access_on  # the coordinator's option of that name
        self.chunk_size = chunk_size
        self.unknown_size = unknown_size
        self.objects: Interner[tuple[int, int]] = Interner()  # (file id, size)
        self.groups: Interner[int] = Interner()
        try:
            self.engine = create_engine(with_driver(url))  # the coordinator's choice of PostgreSQL driver
        except (SQLAlchemyError, ImportError) as exc:  # not a URL, an unknown dialect, its driver not installed
            raise ValueError(f"--history {_shown(url)}: not a database SQLAlchemy can open ({exc}); the "
                             f"coordinator's database URL, e.g. sqlite:////var/lib/htda/coordinator.db") from None
        if schema:  # the coordinator's ``schema`` option: its tables live in that PostgreSQL schema
            self.engine = self.engine.execution_options(schema_translate_map={None: schema})

    def requests(self) -> int:
        """How many accesses the database holds."""
        try:
            with self.engine.connect() as conn:
                return int(conn.execute(accesses_query(self.access_on, func.count())).scalar_one())
        except SQLAlchemyError as exc:
            raise self._error(exc) from None

    def _error(self, exc: SQLAlchemyError) -> ValueError:
        orig = getattr(exc, "orig", None)  # the driver's own error, on the DBAPIError subclasses
        reason = str(orig if orig is not None else exc).splitlines()[0]
        return ValueError(f"cannot read the coordinator's history from {self.engine.url!r}: {reason}")

    def chunks(self) -> Iterator[Chunk]:
        try:
            yield from self._chunks()
        except SQLAlchemyError as exc:
            raise self._error(exc) from None

    def _chunks(self) -> Iterator[Chunk]:
        when, job = (Job.submit_time, Job.id) if self.access_on == "submit" else (JobEvent.time, JobEvent.job)
        query = (accesses_query(self.access_on, when, GroupFile.file_id, File.size, Job.input_group_id,
                                Job.task_group_id)
                 .join(File, File.id == GroupFile.file_id)
                 .order_by(when, job, GroupFile.file_id))
        with self.engine.connect() as conn:
            rows = conn.execution_options(yield_per=self.chunk_size).execute(query)
            for part in rows.partitions(self.chunk_size):
                times, ids, sizes, groups = [], [], [], []
                for t, file_id, size, input_group, task_group in part:
                    size = self.unknown_size if size is None else int(size)
                    if not 0 <= size <= MAX_BYTES or t is None or not math.isfinite(t):
                        raise ValueError(f"the coordinator's history in {self.engine.url!r} is damaged: file "
                                         f"{file_id} is {size} bytes, read at time {t} (sizes from 0 to 8 EiB, "
                                         f"finite times)")
                    times.append(float(t))
                    ids.append(self.objects((file_id, size)))
                    sizes.append(size)
                    groups.append(self.groups(task_group if task_group is not None else input_group))
                yield Chunk.from_lists(times, ids, sizes, groups)

    __iter__ = chunks

    def close(self) -> None:
        self.engine.dispose()


def _shown(url: str) -> str:
    """``url`` to print: its password masked where it parses (it may be the coordinator's own)."""
    try:
        return repr(make_url(url).render_as_string(hide_password=True))
    except (SQLAlchemyError, ValueError):
        return repr(url)

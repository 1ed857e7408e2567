"""Schema migrations of the coordinator's database, with Alembic.

Every change of :mod:`htda.coordinator.model` gets a revision in ``versions/``
(``python -m htda.coordinator.migrations revision -m "what changes"`` writes
one to fill in; ``... check`` says whether the model and the revisions agree).
:func:`upgrade` runs at every start of the coordinator, in one transaction:

- a new database gets the tables by running every revision;
- a database made before Alembic (it has ``htda_meta.schema_version`` 1 and
  no version table) is stamped as the first revision, which is that schema,
  then upgraded like any other;
- a database at a revision this code does not know (made by a newer HTDA)
  stops start-up with :class:`SchemaVersionError`.

Alembic's version table is ``htda_alembic_version``, in the coordinator's
schema (``db_schema`` on PostgreSQL) like every other table.
"""

from __future__ import annotations

import logging
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, inspect, select

from ..model import Meta

__all__ = ["SchemaVersionError", "VERSION_TABLE", "current", "head", "upgrade"]

VERSION_TABLE = "htda_alembic_version"
HERE = Path(__file__).parent
#: the revision that is the schema of databases made before Alembic (``htda_meta.schema_version`` 1)
LEGACY = {1: "0001"}

log = logging.getLogger("htda.coordinator")


class SchemaVersionError(RuntimeError):
    """The database was made by a newer HTDA (or is not HTDA's)."""


def config() -> Config:
    """Alembic's configuration for these revisions (no ini file: nothing for a site to edit)."""
    cfg = Config()
    cfg.set_main_option("script_location", str(HERE))
    return cfg


def script() -> ScriptDirectory:
    return ScriptDirectory.from_config(config())


def head() -> str:
    """The newest revision this code knows."""
    return _newest(script())


def _newest(scripts: ScriptDirectory) -> str:
    revision = scripts.get_current_head()
    assert revision is not None, "no revisions in htda/coordinator/migrations/versions"
    return revision


def current(conn: Connection, schema: str | None = None) -> str | None:
    """The revision the database is at (None: not under Alembic yet); ``schema``: the PostgreSQL schema of
    HTDA's tables (the connection maps tables without one to it; Alembic's look-ups need it named)."""
    opts = {"version_table": VERSION_TABLE, "version_table_schema": schema}
    return MigrationContext.configure(conn, opts=opts).get_current_revision()


def upgrade(conn: Connection, schema: str | None = None) -> str:
    """Bring the database on ``conn`` to :func:`head` (see the module docstring); return the revision."""
    scripts = script()  # read the revision files once
    target = _newest(scripts)
    at = current(conn, schema)
    legacy = _legacy_revision(conn, schema) if at is None else None
    if at is not None and at not in {s.revision for s in scripts.walk_revisions()}:
        raise SchemaVersionError(f"the database is at schema revision {at}, which this HTDA does not know "
                                 f"(it knows up to {target}): it was made by a newer HTDA; upgrade HTDA")
    cfg = config()
    cfg.attributes["connection"] = conn  # env.py runs the revisions on it, inside the caller's transaction
    cfg.attributes["schema"] = schema
    if legacy is not None:
        command.stamp(cfg, legacy)
    if (at or legacy) != target:
        log.info("upgrading the coordinator database from schema revision %s to %s", at or legacy or "(empty)",
                 target)
        command.upgrade(cfg, "head")
    return target


def _legacy_revision(conn: Connection, schema: str | None) -> str | None:
    """The revision of a database made before Alembic, from ``htda_meta.schema_version``; None if it is empty."""
    if not inspect(conn).has_table(Meta.__tablename__, schema=schema):
        return None
    row = conn.execute(select(Meta.value).where(Meta.key == "schema_version")).first()
    if row is None:
        return None
    version = int(row[0])
    if version not in LEGACY:
        raise SchemaVersionError(f"the database has schema version {version}, which this HTDA does not know; "
                                 f"it was made by a newer HTDA (or is not HTDA's): upgrade HTDA")
    return LEGACY[version]

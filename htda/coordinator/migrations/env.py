"""Alembic's environment for the coordinator's revisions: run on the connection :func:`upgrade` passes in."""

from alembic import context

from htda.coordinator.migrations import VERSION_TABLE
from htda.coordinator.model import Base

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("the coordinator's migrations run through htda.coordinator.migrations.upgrade "
                       "(or python -m htda.coordinator.migrations), which passes the connection in")
context.configure(connection=connection, target_metadata=Base.metadata, version_table=VERSION_TABLE,
                  version_table_schema=context.config.attributes.get("schema"))
with context.begin_transaction():
    context.run_migrations()

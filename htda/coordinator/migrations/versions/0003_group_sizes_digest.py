"""A digest of each job group's file sizes.

The submit agent sends the sizes of a job's inputs where it sees the storage.  Checking them against the file
rows took five index probes a job (the files' keys), a bulk ingest's largest cost on millions of files; a job
of a known group that brings the sizes last written for it (the digest matches) now needs none.

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import context, op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def _schema() -> str | None:
    """The coordinator's schema: a column added by name is not translated as a table's DDL is."""
    return context.config.attributes.get("schema")


def upgrade() -> None:
    op.add_column("htda_groups", sa.Column("sizes_digest", sa.BigInteger(), nullable=True), schema=_schema())


def downgrade() -> None:
    with op.batch_alter_table("htda_groups", schema=_schema()) as batch:
        batch.drop_column("sizes_digest")

"""The schema of HTDA's coordinator before Alembic (``htda_meta.schema_version`` 1).

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

TABLES = ("htda_job_events", "htda_releases", "htda_pins", "htda_jobs", "htda_group_files", "htda_assignments",
          "htda_nodes", "htda_meta", "htda_groups", "htda_files")


def upgrade() -> None:
    op.create_table(
        "htda_files",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("key", sa.String(length=40), nullable=False),
        sa.Column("lfn", sa.Text(), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=True),
        sa.Column("mtime", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("key"),
    )
    op.create_table(
        "htda_groups",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=512), nullable=False),
        sa.Column("kind", sa.String(length=8), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name"),
    )
    op.create_table(
        "htda_meta",
        sa.Column("key", sa.String(length=64), nullable=False),
        sa.Column("value", sa.String(length=255), nullable=False),
        sa.PrimaryKeyConstraint("key"),
    )
    op.create_table(
        "htda_nodes",
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("url", sa.Text(), nullable=True),
        sa.Column("capacity_bytes", sa.BigInteger(), nullable=True),
        sa.Column("free_bytes", sa.BigInteger(), nullable=True),
        sa.Column("last_seen", sa.Float(), nullable=True),
        sa.Column("draining", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )
    op.create_table(
        "htda_assignments",
        sa.Column("file_id", sa.Integer(), nullable=False),
        sa.Column("node", sa.String(length=255), nullable=False),
        sa.Column("cycle", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["file_id"], ["htda_files.id"]),
        sa.PrimaryKeyConstraint("file_id"),
    )
    op.create_index("ix_htda_assignments_node", "htda_assignments", ["node"], unique=False)
    op.create_table(
        "htda_group_files",
        sa.Column("group_id", sa.Integer(), nullable=False),
        sa.Column("file_id", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["file_id"], ["htda_files.id"]),
        sa.ForeignKeyConstraint(["group_id"], ["htda_groups.id"]),
        sa.PrimaryKeyConstraint("group_id", "file_id"),
    )
    op.create_index("ix_htda_group_files_file_id", "htda_group_files", ["file_id"], unique=False)
    op.create_table(
        "htda_jobs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.String(length=255), nullable=False),
        sa.Column("owner", sa.String(length=255), nullable=False),
        sa.Column("task", sa.String(length=255), nullable=True),
        sa.Column("cpus", sa.Integer(), nullable=True),
        sa.Column("memory", sa.Integer(), nullable=True),
        sa.Column("submit_time", sa.Float(), nullable=True),
        sa.Column("start_time", sa.Float(), nullable=True),
        sa.Column("end_time", sa.Float(), nullable=True),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("node", sa.String(length=255), nullable=True),
        sa.Column("input_group_id", sa.Integer(), nullable=False),
        sa.Column("task_group_id", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(["input_group_id"], ["htda_groups.id"]),
        sa.ForeignKeyConstraint(["task_group_id"], ["htda_groups.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("job_id"),
    )
    op.create_index("ix_htda_jobs_input_group_id", "htda_jobs", ["input_group_id"], unique=False)
    op.create_table(
        "htda_pins",
        sa.Column("file_id", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["file_id"], ["htda_files.id"]),
        sa.PrimaryKeyConstraint("file_id"),
    )
    op.create_table(
        "htda_releases",
        sa.Column("file_id", sa.Integer(), nullable=False),
        sa.Column("node", sa.String(length=255), nullable=False),
        sa.Column("until", sa.Float(), nullable=False),
        sa.Column("reason", sa.String(length=255), nullable=True),
        sa.ForeignKeyConstraint(["file_id"], ["htda_files.id"]),
        sa.PrimaryKeyConstraint("file_id", "node"),
    )
    op.create_table(
        "htda_job_events",
        sa.Column("job", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("time", sa.Float(), nullable=False),
        sa.Column("node", sa.String(length=255), nullable=True),
        sa.ForeignKeyConstraint(["job"], ["htda_jobs.id"]),
        sa.PrimaryKeyConstraint("job", "state"),
    )


def downgrade() -> None:
    for table in TABLES:
        op.drop_table(table)

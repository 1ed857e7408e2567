"""Job rows without foreign keys to their groups.

PostgreSQL checked each job row's input and task group with a trigger and a row lock on the group: 8-16 ms of
the 23 ms a batch of 1,000 job rows took to insert.  The coordinator writes a job's groups in the transaction
that writes the job, and never deletes a group, so the keys guarded nothing it could break.

Revision ID: 0002
Revises: 0001
"""

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

COLUMNS = ("input_group_id", "task_group_id")
# SQLite keeps its foreign keys unnamed: batch mode rebuilds the table, naming them by this convention to drop them
NAMING = {"fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s"}


def _name(column: str) -> str:
    if op.get_bind().dialect.name == "sqlite":
        return f"fk_htda_jobs_{column}_htda_groups"
    return f"htda_jobs_{column}_fkey"  # PostgreSQL's name for the unnamed constraints of revision 0001


def upgrade() -> None:
    with op.batch_alter_table("htda_jobs", naming_convention=NAMING) as batch:
        for column in COLUMNS:
            batch.drop_constraint(_name(column), type_="foreignkey")


def downgrade() -> None:
    with op.batch_alter_table("htda_jobs") as batch:
        for column in COLUMNS:
            batch.create_foreign_key(_name(column), "htda_groups", [column], ["id"])

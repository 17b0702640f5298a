"""trialflow_dag_limits.dag_id holds the key of a task group's experiment too (``dag:group``,
trialflow 0.2.0): a DAG id and a task group id, each up to 250 characters, and the ':'. At 250
PostgreSQL refused the row of a long pair (SQLite does not enforce lengths; batch mode copies
the table there all the same, so both hold the same declared schema).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("trialflow_dag_limits") as batch:
        batch.alter_column("dag_id", existing_type=sa.String(250), type_=sa.String(501), existing_nullable=False)


def downgrade() -> None:
    raise NotImplementedError("trialflow stores are not downgraded: restore the backup taken before upgrading")

"""When each intermediate result reached the store (``trialflow_result_times``): MLflow gets
each step stamped with it (trialflow.tracking), not the trial's start plus a millisecond a
step. Results stored before it have no time, and keep the old stamps.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

NAME = "trialflow_result_times"


def upgrade() -> None:
    if NAME not in set(sa.inspect(op.get_bind()).get_table_names()):
        op.create_table(
            NAME,
            sa.Column("trial_id", sa.Integer, primary_key=True),
            sa.Column("step", sa.Integer, primary_key=True),
            sa.Column("reported_at", sa.Float, nullable=False),
        )


def downgrade() -> None:
    raise NotImplementedError("trialflow stores are not downgraded: restore the backup taken before upgrading")

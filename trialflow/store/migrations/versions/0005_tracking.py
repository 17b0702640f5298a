"""trialflow's tracking outbox (``trialflow_tracking``): what of each trial has reached the
experiment's MLflow run, so a tracking server that was down gets what it missed, once
(trialflow.tracking.outbox).

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

NAME = "trialflow_tracking"


def upgrade() -> None:
    if NAME not in set(sa.inspect(op.get_bind()).get_table_names()):
        op.create_table(
            NAME,
            sa.Column("study_id", sa.Integer, primary_key=True),
            sa.Column("run_key", sa.String(64), primary_key=True),
            sa.Column("run_id", sa.String(64), nullable=True),
            sa.Column("run_url", sa.String(2048), nullable=True),
            sa.Column("sent", sa.Text, nullable=False),
            sa.Column("claimed_until", sa.Float, nullable=False),
            sa.Column("updated_at", sa.Float, nullable=False),
        )


def downgrade() -> None:
    raise NotImplementedError("trialflow stores are not downgraded: restore the backup taken before upgrading")

"""trialflow 0.1.0's tables, as 0.1.0 created them (a store of 0.1.0 has them without a
version; those it never needed, such as the queue before the first added trial, are created).

Revision ID: 0001
Revises:
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    present = set(sa.inspect(op.get_bind()).get_table_names())
    if "trialflow_trial_index" not in present:
        op.create_table(
            "trialflow_trial_index",
            sa.Column("study_id", sa.Integer, primary_key=True),
            sa.Column("trial_index", sa.Integer, primary_key=True),
            sa.Column("trial_id", sa.Integer, nullable=False),
        )
    indexes = {i["name"] for i in sa.inspect(op.get_bind()).get_indexes("trialflow_trial_index")}
    if "ix_trialflow_trial_index_trial_id" not in indexes:
        op.create_index("ix_trialflow_trial_index_trial_id", "trialflow_trial_index", ["trial_id"])
    if "trialflow_trial_queue" not in present:
        op.create_table(
            "trialflow_trial_queue",
            sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
            sa.Column("study_id", sa.Integer, nullable=False, index=True),
            sa.Column("parameters", sa.Text, nullable=False),
            sa.Column("request", sa.Text, nullable=False),
            sa.Column("claimed_index", sa.Integer, nullable=True),
        )
    if "trialflow_dag_limits" not in present:
        op.create_table(
            "trialflow_dag_limits",
            sa.Column("dag_id", sa.String(250), primary_key=True),
            sa.Column("experiment_id", sa.String(64), nullable=False),
            sa.Column("trial_concurrency", sa.Integer, nullable=False),
            sa.Column("updated_at", sa.Float, nullable=False),
        )
    if "trialflow_trial_snapshots" not in present:
        op.create_table(
            "trialflow_trial_snapshots",
            sa.Column("study_id", sa.Integer, primary_key=True),
            sa.Column("optuna_version", sa.String(64), nullable=False),
            sa.Column("last_finished_trial_id", sa.Integer, nullable=False),
            sa.Column("trial_count", sa.Integer, nullable=False),
            sa.Column("payload", sa.LargeBinary, nullable=False),
        )
    if "trialflow_checked_schema" not in present:
        op.create_table(
            "trialflow_checked_schema",
            sa.Column("optuna_version", sa.String(64), primary_key=True),
            sa.Column("revision", sa.String(64), nullable=False),
        )


def downgrade() -> None:
    raise NotImplementedError("trialflow stores are not downgraded: restore the backup taken before upgrading")

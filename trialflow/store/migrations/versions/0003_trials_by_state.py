"""An index of Optuna's trials by (study, state), trialflow's own (``ix_trialflow_trials_study_state``):
counting an experiment's finished trials and reading its running ones scanned every trial of
the study (Optuna indexes trials by study only), four times per ask and once per second in the
run's watch; ~35 ms each at 100,000 trials.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

NAME = "ix_trialflow_trials_study_state"


def upgrade() -> None:
    if NAME not in {i["name"] for i in sa.inspect(op.get_bind()).get_indexes("trials")}:
        op.create_index(NAME, "trials", ["study_id", "state"])


def downgrade() -> None:
    raise NotImplementedError("trialflow stores are not downgraded: restore the backup taken before upgrading")

"""trialflow's index of trials, and creating trialflow's own tables in a store.

"CREATE TABLE" is not safe against a concurrent twin: two editors adding the first trials of
an experiment at once both found the queue table missing, and the loser failed with "table
trialflow_trial_queue already exists" (SQLite; PostgreSQL raises a unique violation on
pg_type), so its action was lost. The loser now looks again, and finds the table there.
"""

from __future__ import annotations

from collections.abc import Callable

import sqlalchemy as sa

#: What a CREATE TABLE that lost to a concurrent one raises, by database.
_LOST_TO_A_TWIN = (sa.exc.OperationalError, sa.exc.ProgrammingError, sa.exc.IntegrityError)


def create_tables(metadata: sa.MetaData, engine: sa.Engine) -> None:
    """Create ``metadata``'s tables that are missing; a concurrent creator's win is fine."""
    _twin_safe(lambda: metadata.create_all(engine, checkfirst=True))


def _twin_safe(create: Callable[[], None]) -> None:
    try:
        create()
    except _LOST_TO_A_TWIN:
        create()  # another process created it meanwhile: this look finds it there


#: trial index -> Optuna trial, one row per (study, index). Optuna can only find a trial by a
#: user attribute by loading every trial; this makes the lookup one indexed query and makes
#: "one Optuna trial per trial index" a constraint the database enforces, on every backend.
TRIAL_INDEX = sa.Table(
    "trialflow_trial_index",
    sa.MetaData(),
    sa.Column("study_id", sa.Integer, primary_key=True),
    sa.Column("trial_index", sa.Integer, primary_key=True),
    sa.Column("trial_id", sa.Integer, nullable=False),
)
#: Pages join from Optuna's trials to their index: without this, SQLite scans the table per trial.
TRIAL_INDEX_BY_TRIAL = sa.Index("ix_trialflow_trial_index_trial_id", TRIAL_INDEX.c.trial_id)

#: Optuna's trials table, as far as trialflow indexes it (its own declaration is Optuna's).
_OPTUNA_TRIALS = sa.Table(
    "trials",
    sa.MetaData(),
    sa.Column("trial_id", sa.Integer, primary_key=True),
    sa.Column("study_id", sa.Integer),
    sa.Column("state", sa.String(8)),
)
#: A study's trials by state (migration 0003): Optuna indexes its trials by study only, so
#: counting an experiment's finished trials and reading its running ones scanned every trial of
#: it; at 100,000 trials each ask did so four times (~35 ms each) and the run's watch each
#: second. Optuna's tables are Optuna's; this index alone is trialflow's, named as its own.
TRIALS_BY_STATE = sa.Index("ix_trialflow_trials_study_state", _OPTUNA_TRIALS.c.study_id, _OPTUNA_TRIALS.c.state)


def create_index(index: sa.Index, engine: sa.Engine) -> None:
    """Create ``index`` when it is missing; a concurrent creator's win is fine."""
    _twin_safe(lambda: index.create(engine, checkfirst=True))

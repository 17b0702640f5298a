"""trialflow's own tables in a store, declared in one MetaData (``METADATA``), and creating
them.

One declaration of each table, in one place, as Optuna keeps its own in
``optuna/storages/_rdb/models.py``: the schema check (trialflow.store.schema) creates a
new store from ``METADATA``, and a test compares it with what the migrations make, so a table
changed here without a migration fails. The modules that read and write a table import it
from here; a table a module creates on first use is created alone (``create_table``), never
the whole set: a store whose first write came from the DAG-parse path must still look new
(no trial index) to the schema check, not like a store of trialflow 0.1.0.

"CREATE TABLE" is not safe against a concurrent twin: two editors adding the first trials of
an experiment at once both found the queue table missing, and the loser failed with "table
trialflow_trial_queue already exists" (SQLite; PostgreSQL raises a unique violation on
pg_type), so its action was lost. The loser now looks again, and finds the table there.
"""

from __future__ import annotations

from collections.abc import Callable

import sqlalchemy as sa

from trialflow.store.version import CHECKED_TABLE

#: What a CREATE TABLE that lost to a concurrent one raises, by database.
_LOST_TO_A_TWIN = (sa.exc.OperationalError, sa.exc.ProgrammingError, sa.exc.IntegrityError)


def create_tables(metadata: sa.MetaData, engine: sa.Engine) -> None:
    """Create ``metadata``'s tables that are missing; a concurrent creator's win is fine."""
    _twin_safe(lambda: metadata.create_all(engine, checkfirst=True))


def create_table(table: sa.Table, engine: sa.Engine) -> None:
    """Create ``table`` (and its indexes) if it is missing; a concurrent creator's win is fine."""
    _twin_safe(lambda: table.create(engine, checkfirst=True))


def _twin_safe(create: Callable[[], None]) -> None:
    try:
        create()
    except _LOST_TO_A_TWIN:
        create()  # another process created it meanwhile: this look finds it there


#: trial index -> Optuna trial, one row per (study, index). Optuna can only find a trial by a
#: user attribute by loading every trial; this makes the lookup one indexed query and makes
#: "one Optuna trial per trial index" a constraint the database enforces, on every backend.
METADATA = sa.MetaData()
TRIAL_INDEX = sa.Table(
    "trialflow_trial_index",
    METADATA,
    sa.Column("study_id", sa.Integer, primary_key=True),
    sa.Column("trial_index", sa.Integer, primary_key=True),
    sa.Column("trial_id", sa.Integer, nullable=False),
)
#: Pages join from Optuna's trials to their index: without this, SQLite scans the table per trial.
TRIAL_INDEX_BY_TRIAL = sa.Index("ix_trialflow_trial_index_trial_id", TRIAL_INDEX.c.trial_id)

#: Trials added by hand, waiting for a trial index to take them (trialflow.store.trial_queue).
TRIAL_QUEUE = sa.Table(
    "trialflow_trial_queue",
    METADATA,
    sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("study_id", sa.Integer, nullable=False, index=True),
    sa.Column("parameters", sa.Text, nullable=False),
    sa.Column("request", sa.Text, nullable=False),
    #: The trial index that took it; -1: dropped (its parameters no longer fit the space).
    sa.Column("claimed_index", sa.Integer, nullable=True),
)
#: trialConcurrency as a person changed it, read when the DAG file is parsed
#: (trialflow.store.concurrency_changes).
DAG_LIMITS = sa.Table(
    "trialflow_dag_limits",
    METADATA,
    #: limits_key: a DAG id, or "dag:group" (each id up to 250 characters; migration 0002).
    sa.Column("dag_id", sa.String(501), primary_key=True),
    sa.Column("experiment_id", sa.String(64), nullable=False),
    sa.Column("trial_concurrency", sa.Integer, nullable=False),
    sa.Column("updated_at", sa.Float, nullable=False),
)


def _cache_rows(name: str, position: str) -> sa.Table:
    """A table of per-study cache rows (the snapshot, the history window): what a process read
    of a study's trials up to the trial id in column ``position``, how many trials there were up
    to it (``trial_count``: a row whose count moved no longer holds for the study, see
    trialflow.store.snapshot.checked_row), the Optuna that wrote it, and the payload."""
    return sa.Table(
        name,
        METADATA,
        sa.Column("study_id", sa.Integer, primary_key=True),
        sa.Column("optuna_version", sa.String(64), nullable=False),
        sa.Column(position, sa.Integer, nullable=False),
        sa.Column("trial_count", sa.Integer, nullable=False),  # finished + unfinished at or below it
        sa.Column("payload", sa.LargeBinary, nullable=False),
    )


#: An experiment's finished trials in one row (trialflow.store.snapshot).
SNAPSHOTS = _cache_rows("trialflow_trial_snapshots", "last_finished_trial_id")
#: The tuner's window of an experiment's history in one row (trialflow.tuning.history).
WINDOWS = _cache_rows("trialflow_history_windows", "last_trial_id")
#: The Optuna versions that checked the store's Optuna schema (trialflow.store.schema_check).
CHECKED = sa.Table(
    CHECKED_TABLE,
    METADATA,
    sa.Column("optuna_version", sa.String(64), primary_key=True),
    sa.Column("revision", sa.String(64), nullable=False),
)

#: What of each trial has reached the experiment's MLflow run (trialflow.tracking.outbox): one
#: row per (study, ``run_key``: ``experiment`` for the experiment's own run, a trial index, or
#: ``prior:<trial id>`` for warm-start history), with the MLflow run's id once made, what was
#: sent (``sent``: JSON, trialflow.tracking.outbox.Sent) and a claim on the row, so that two
#: processes never make two MLflow runs for one trial nor send one result twice.
TRACKING = sa.Table(
    "trialflow_tracking",
    METADATA,
    sa.Column("study_id", sa.Integer, primary_key=True),
    sa.Column("run_key", sa.String(64), primary_key=True),
    sa.Column("run_id", sa.String(64), nullable=True),
    sa.Column("run_url", sa.String(2048), nullable=True),
    sa.Column("sent", sa.Text, nullable=False),
    #: Until when (epoch seconds) one process may make this row's run; 0: nobody holds it.
    sa.Column("claimed_until", sa.Float, nullable=False),
    sa.Column("updated_at", sa.Float, nullable=False),
)

#: When each intermediate result reached the store (migration 0006): one row per (Optuna trial,
#: step), the first reading's time kept (a result read again after a restart keeps its stamp),
#: so MLflow's wall-time axes show when results came, not the trial's start plus a millisecond
#: a step. NNI's manager stamped a metric on receipt the same way.
RESULT_TIMES = sa.Table(
    "trialflow_result_times",
    METADATA,
    sa.Column("trial_id", sa.Integer, primary_key=True),
    sa.Column("step", sa.Integer, primary_key=True),
    sa.Column("reported_at", sa.Float, nullable=False),
)

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

"""A DAG's trialConcurrency as a person changed it for its running experiment.

Airflow enforces trialConcurrency (the trial task's ``max_active_tis_per_dagrun``, read by the
scheduler from the serialized DAG), so a new value must reach the DAG: the action writes it
here, asks Airflow to parse the DAG file again, and ``experiment_dag`` reads it at that parse.
Only SQLAlchemy here: DAG parsing imports this module, and Optuna would cost it half a second.
The row belongs to one experiment; its end step removes it, so the DAG's next experiment
starts from the config's value again.
"""

from __future__ import annotations

import time

import sqlalchemy as sa

from trialflow.store.tables import DAG_LIMITS, create_table


def limits_key(dag_id: str, group: str | None = None) -> str:
    """The row of the experiment of ``dag_id`` (or of its task group ``group``: a DAG may hold
    several experiments, each its own mapped trial task). Airflow ids never hold ':'."""
    return dag_id if group is None else f"{dag_id}:{group}"


def read_concurrency(engine: sa.Engine, dag_id: str) -> int | None:
    """The changed trialConcurrency of ``dag_id``'s running experiment, or None (none changed,
    or a store made before this table: nothing was ever changed there)."""
    try:
        with engine.connect() as conn:
            value = conn.execute(
                sa.select(DAG_LIMITS.c.trial_concurrency).where(DAG_LIMITS.c.dag_id == dag_id)
            ).scalar_one_or_none()
    except (sa.exc.OperationalError, sa.exc.ProgrammingError):  # no such table
        return None
    return None if value is None else int(value)


def write_concurrency(engine: sa.Engine, dag_id: str, experiment_id: str, value: int) -> None:
    create_table(DAG_LIMITS, engine)
    with engine.begin() as conn:
        conn.execute(sa.delete(DAG_LIMITS).where(DAG_LIMITS.c.dag_id == dag_id))
        conn.execute(
            sa.insert(DAG_LIMITS).values(
                dag_id=dag_id, experiment_id=experiment_id, trial_concurrency=int(value), updated_at=time.time()
            )
        )


def clear(engine: sa.Engine, dag_id: str, experiment_id: str) -> bool:
    """Forget ``experiment_id``'s change (its experiment ended); True if there was one."""
    try:
        with engine.begin() as conn:
            result = conn.execute(
                sa.delete(DAG_LIMITS).where(DAG_LIMITS.c.dag_id == dag_id, DAG_LIMITS.c.experiment_id == experiment_id)
            )
    except (sa.exc.OperationalError, sa.exc.ProgrammingError):
        return False
    return bool(result.rowcount)

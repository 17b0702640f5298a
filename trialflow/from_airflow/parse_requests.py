"""A changed trialConcurrency's DAG parse, asked for until the scheduler's DAG shows it.

The pages' limits action writes the new value to the store and asks the dag-processor to parse
the DAG file now (what Airflow's reparse button does); that parse reads the value
(concurrency_at_parse) and the scheduler enforces it from the serialized DAG. Airflow drops a
request it claims while the same file is being parsed (the dag-processor skips a file already in
progress), and that parse may have read the store before the write: the change then waited for
the periodic parse (``min_file_process_interval``: 31.5 s after the click in CI, stop 69). So the
request is a level, not an event: after asking, the api-server compares the trial task's
``max_active_tis_per_dagrun`` in the serialized DAG with the value asked for, and asks again
every few seconds until it shows or a bound passes. If the api-server dies meanwhile nothing is
lost: every later parse reads the stored value.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from trialflow import task_ids

if TYPE_CHECKING:
    import sqlalchemy as sa

log = logging.getLogger(__name__)

#: How often a parse is asked for again while the DAG does not show the value, and for how long.
ASK_EVERY_S = 3.0
ASK_WITHIN_S = 90.0


def request_parse(dag_id: str) -> bool:
    """Ask the dag-processor to parse the DAG's file now. False if the DAG is not known."""
    from airflow.models.dag import DagModel
    from airflow.models.dagbag import DagPriorityParsingRequest
    from airflow.utils.session import create_session
    from sqlalchemy.exc import IntegrityError

    with create_session() as session:
        dag = session.get(DagModel, dag_id)
        if dag is None or not dag.relative_fileloc:
            return False
        bundle, file = dag.bundle_name, dag.relative_fileloc
    try:
        with create_session() as session:
            session.merge(DagPriorityParsingRequest(bundle_name=bundle, relative_fileloc=file))
    except IntegrityError:
        # A parse of that file is already asked for (two changes within seconds): that parse
        # reads the newest limit, so this is not an error (it answered 500 after the change).
        pass
    return True


def scheduled_concurrency(dag_id: str, group: str | None) -> int | None:
    """The trial task's ``max_active_tis_per_dagrun`` in the DAG the scheduler reads (None: no
    such DAG or task)."""
    from airflow.models.serialized_dag import SerializedDagModel

    serialized = SerializedDagModel.get(dag_id)
    if serialized is None:
        return None
    trial = task_ids.task_id(task_ids.TRIAL, group)
    if not serialized.dag.has_task(trial):
        return None
    value = serialized.dag.get_task(trial).max_active_tis_per_dagrun
    return None if value is None else int(value)


def ask_until(
    shown: Callable[[], bool],
    ask: Callable[[], object],
    *,
    every: float = ASK_EVERY_S,
    within: float = ASK_WITHIN_S,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> bool:
    """Ask again every ``every`` seconds until ``shown()``, for at most ``within`` seconds:
    whether it showed (a check that raises counts as not shown, and is logged)."""
    deadline = clock() + within
    while True:
        sleep(every)
        try:
            if shown():
                return True
        except Exception as exc:
            log.warning("the DAG's trialConcurrency could not be read back (%s); asking again", exc)
        if clock() + every > deadline:
            return False
        log.info("the DAG does not show the change yet: its parse is asked for again")
        ask()


def parse_until_shown(engine: sa.Engine, dag_id: str, group: str | None) -> bool:
    """Ask for ``dag_id``'s parse until its trial task allows the stored trialConcurrency at once
    (run after the action answered: the person is not kept waiting for the dag-processor). The
    stored value is read at each check: a second change, or the experiment's end (which removes
    it), ends this one's asking."""
    from trialflow.store.concurrency_changes import limits_key, read_concurrency

    def shown() -> bool:
        wanted = read_concurrency(engine, limits_key(dag_id, group))
        return wanted is None or scheduled_concurrency(dag_id, group) == wanted

    if ask_until(shown, lambda: request_parse(dag_id)):
        return True
    log.warning(
        "%s: the changed trialConcurrency is not in the scheduler's DAG after %.0f s of parse "
        "requests; the dag-processor's next parse of its file reads it",
        dag_id,
        ASK_WITHIN_S,
    )
    return False

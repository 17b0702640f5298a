"""trialConcurrency as a person changed it, read when Airflow parses an experiment's DAG file.

The scheduler enforces a trial task's ``max_active_tis_per_dagrun`` from the serialized DAG,
which the dag-processor writes: that parse is the one that must see a changed value
(trialflow.store.concurrency_changes). A worker parses the file too, to run one task, and never needs
it: there nothing is read. A store that cannot be read leaves the config's value, never a DAG
that fails to parse.
"""

from __future__ import annotations

import logging
from pathlib import Path

log = logging.getLogger(__name__)


def in_a_task() -> bool:
    """True when this parse is a worker's, for one task (Airflow's parsing context says so)."""
    try:
        from airflow.sdk import get_parsing_context

        return get_parsing_context().task_id is not None
    except Exception:
        return False


def _store_url(store_conn_id: str) -> str | None:
    """The store's URL, quietly (this runs at every parse): the default connection missing means
    the embedded store; another one missing means nothing to read here (the start step says so)."""
    from airflow.sdk import BaseHook

    from trialflow.hooks.experiment_store import DEFAULT_CONN_ID, default_store_url, store_url_from_connection

    try:
        conn = BaseHook.get_connection(store_conn_id)
    except Exception:
        return default_store_url() if store_conn_id == DEFAULT_CONN_ID else None
    return store_url_from_connection(conn, store_conn_id)


def changed_concurrency(store_conn_id: str, dag_id: str, group: str | None = None) -> int | None:
    """The trialConcurrency a person set for ``dag_id``'s running experiment (its task group
    ``group``'s), or None."""
    if in_a_task():
        return None
    try:
        from sqlalchemy.engine import make_url

        from trialflow.store.concurrency_changes import limits_key, read_concurrency
        from trialflow.store.urls import engine_for

        url = _store_url(store_conn_id)
        if url is None:
            return None
        parsed = make_url(url)
        if parsed.get_backend_name() == "sqlite" and not Path(parsed.database or "").is_file():
            return None  # no store yet: nothing was changed (and no empty file is made here)
        return read_concurrency(engine_for(url), limits_key(dag_id, group))
    except Exception as exc:
        log.warning("trialConcurrency of %s: the store could not be read (%s); using the config's", dag_id, exc)
        return None

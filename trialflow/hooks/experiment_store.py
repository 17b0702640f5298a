"""The experiment store behind an Airflow connection.

Connection type ``trialflow`` (default id ``trialflow_default``):

* ``extra.storage_url`` — any SQLAlchemy URL without a password, e.g.
  ``sqlite:////data/experiments.db``;
* or host/port/schema/login/password plus ``extra.dialect`` (``postgresql``,
  ``mysql+pymysql``...) so the password stays in the connection's secret field
  and Airflow masks it in logs.

Without that connection, the store is a SQLite file under ``$AIRFLOW_HOME``,
so the one-line DAG works on an existing Airflow with no setup.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseHook

if TYPE_CHECKING:
    from trialflow.store.experiment_store import ExperimentStore

log = logging.getLogger(__name__)
DEFAULT_CONN_ID = "trialflow_default"


def default_store_url() -> str:
    from trialflow.store.urls import sqlite_url  # not Optuna: DAG parsing asks for it

    home = Path(os.environ.get("AIRFLOW_HOME") or Path.home() / "airflow")
    return sqlite_url(home / "trialflow" / "experiments.db")


def store_url_from_connection(conn: Any, conn_id: str = DEFAULT_CONN_ID) -> str:
    """The store's SQLAlchemy URL from a ``trialflow`` connection (a task's, or the api-server's
    ``airflow.models.Connection``: both have the same fields)."""
    extra = conn.extra_dejson or {}
    if extra.get("storage_url"):
        return str(extra["storage_url"])
    dialect = extra.get("dialect")
    if not dialect or not conn.host:
        raise ValueError(f"connection {conn_id!r} needs extra.storage_url, or host and extra.dialect (e.g. postgresql)")
    from sqlalchemy.engine import URL

    return URL.create(
        dialect, username=conn.login, password=conn.password, host=conn.host, port=conn.port, database=conn.schema
    ).render_as_string(hide_password=False)


class ExperimentStoreHook(BaseHook):
    """The experiment store (an Optuna RDB storage with trialflow's index table) named by a
    ``trialflow`` connection, so its password lives in Airflow's secrets, not in a DAG.

    :param trialflow_conn_id: the connection; when it does not exist, the default SQLite
        store under ``$AIRFLOW_HOME`` (only for the default id: a named connection that is
        missing is an error, not a silent second store).
    """

    conn_name_attr = "trialflow_conn_id"
    default_conn_name = DEFAULT_CONN_ID
    conn_type = "trialflow"
    hook_name = "trialflow experiment store"

    def __init__(self, trialflow_conn_id: str = DEFAULT_CONN_ID, **kwargs: Any):
        super().__init__(**kwargs)
        self.trialflow_conn_id = trialflow_conn_id

    def storage_url(self) -> str:
        try:
            conn = self.get_connection(self.trialflow_conn_id)
        except Exception as exc:  # AirflowNotFoundException and its 3.x variants
            if self.trialflow_conn_id != DEFAULT_CONN_ID:
                raise ValueError(f"trialflow store connection {self.trialflow_conn_id!r} not found: {exc}") from exc
            url = default_store_url()
            log.info("No %s connection; using the embedded store %s", DEFAULT_CONN_ID, url)
            return url
        return store_url_from_connection(conn, self.trialflow_conn_id)

    def get_conn(self) -> ExperimentStore:
        # Imported here: Optuna costs ~0.5 s, and DAG parsing imports this module.
        from trialflow.store.experiment_store import ExperimentStore
        from trialflow.store.urls import safe_url

        store = ExperimentStore(self.storage_url())
        log.info("Experiment store: %s", safe_url(store.url))
        return store

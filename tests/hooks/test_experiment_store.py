"""The experiment store behind an Airflow connection: which store a ``trialflow`` connection
names (Airflow resolves the connections here from ``AIRFLOW_CONN_*``, as it does for a task),
the default store when there is none, and a named connection that is missing refused by name."""

from __future__ import annotations

import asyncio
import json

import pytest
from sqlalchemy.engine import make_url

from trialflow.hooks import connection_password
from trialflow.hooks.experiment_store import DEFAULT_CONN_ID, ExperimentStoreHook, default_store_url


def _connection(monkeypatch, conn_id: str, **fields) -> None:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(fields))


def test_a_storage_url_in_the_extra_is_the_store(monkeypatch, tmp_path):
    url = f"sqlite:///{tmp_path / 'named.db'}"
    _connection(monkeypatch, "store_a", conn_type="trialflow", extra={"storage_url": url})
    hook = ExperimentStoreHook("store_a")
    assert hook.storage_url() == url
    store = hook.get_conn()  # a real store, created where the connection says
    assert (tmp_path / "named.db").is_file() and store.url.endswith("named.db")


def test_a_password_stays_in_the_connections_secret_field_and_survives_odd_characters(monkeypatch):
    """host/login/password/schema plus extra.dialect: the password may hold ``@``, ``/``, ``:``
    and ``%`` (a URL built by hand would break on them); the URL parses back to the same parts."""
    password = "p@ss/w:rd%41 é"
    _connection(
        monkeypatch,
        "store_pg",
        conn_type="trialflow",
        host="db.internal",
        port=5433,
        login="tuner",
        password=password,
        schema="experiments",
        extra={"dialect": "postgresql"},
    )
    url = make_url(ExperimentStoreHook("store_pg").storage_url())
    assert (url.drivername, url.host, url.port, url.username, url.database) == (
        "postgresql",
        "db.internal",
        5433,
        "tuner",
        "experiments",
    )
    assert url.password == password


def test_a_connection_naming_neither_a_url_nor_a_dialect_says_what_it_needs(monkeypatch):
    _connection(monkeypatch, "store_half", conn_type="trialflow", host="db.internal")
    with pytest.raises(ValueError, match=r"connection 'store_half' needs extra.storage_url, or host and extra.dialect"):
        ExperimentStoreHook("store_half").storage_url()


def test_without_the_default_connection_the_store_is_the_one_under_airflow_home(monkeypatch, tmp_path):
    monkeypatch.delenv(f"AIRFLOW_CONN_{DEFAULT_CONN_ID.upper()}", raising=False)
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))
    assert ExperimentStoreHook().storage_url() == default_store_url()
    assert make_url(default_store_url()).database == str(tmp_path / "trialflow" / "experiments.db")


def test_a_named_connection_that_is_missing_is_an_error_not_a_second_store(monkeypatch):
    monkeypatch.delenv("AIRFLOW_CONN_NO_SUCH_STORE", raising=False)
    with pytest.raises(ValueError, match="trialflow store connection 'no_such_store' not found"):
        ExperimentStoreHook("no_such_store").storage_url()


def test_a_token_is_a_connections_password_and_an_empty_one_is_refused_by_name(monkeypatch):
    _connection(monkeypatch, "pai_token", conn_type="generic", password="s3cret-token")
    _connection(monkeypatch, "no_token", conn_type="generic", host="x")
    assert asyncio.run(connection_password("pai_token")) == "s3cret-token"
    with pytest.raises(ValueError, match="Airflow connection 'no_token' has no password"):
        asyncio.run(connection_password("no_token"))

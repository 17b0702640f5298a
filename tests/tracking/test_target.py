"""Where an experiment is tracked: an Airflow connection's parts, or MLflow's own environment
variables; the address kept for links and trials never holds a credential."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from trialflow.config.tracking import MlflowConfig
from trialflow.tracking.target import TrackingNotConfigured, from_connection, from_environment, resolve


def _conn(**fields):
    base = dict(conn_type="http", host="mlflow.internal", port=5000, schema="", login=None, password=None)
    base.update(fields)
    extra = base.pop("extra", {})
    return SimpleNamespace(**base, extra_dejson=extra)


@pytest.mark.parametrize(
    ("fields", "uri"),
    [
        ({}, "http://mlflow.internal:5000"),
        ({"conn_type": "https", "port": None}, "https://mlflow.internal"),
        ({"extra": {"scheme": "https"}, "schema": "/mlflow/"}, "https://mlflow.internal:5000/mlflow"),
        ({"host": "https://u:secret@mlflow.example.com/x/", "port": None}, "https://mlflow.example.com/x"),
        ({"conn_type": "generic"}, "http://mlflow.internal:5000"),
    ],
)
def test_a_connections_address(fields, uri):
    target = from_connection(_conn(**fields), MlflowConfig(conn_id="m"), "exp")
    assert target.uri == uri
    assert "secret" not in repr(target)


def test_login_and_password_or_a_token():
    basic = from_connection(_conn(login="u", password="pw-secret"), MlflowConfig(conn_id="m"), "exp")
    assert (basic.username, basic.password, basic.token) == ("u", "pw-secret", None)
    token = from_connection(_conn(password="tok"), MlflowConfig(conn_id="m"), "exp")
    assert (token.username, token.password, token.token) == (None, None, "tok")
    assert "tok" not in repr(token) and "pw-secret" not in repr(basic)


def test_names_come_from_the_config_or_the_experiment():
    chosen = from_connection(_conn(), MlflowConfig(conn_id="m", experiment_name="team/x", registered_model="m1"), "e")
    assert (chosen.experiment_name, chosen.registered_model) == ("team/x", "m1")
    assert from_connection(_conn(), MlflowConfig(conn_id="m"), "digits").experiment_name == "digits"


@pytest.mark.parametrize("host", ["ftp://h", "file:///tmp/mlruns", "sqlite:///x.db", "http://"])
def test_only_an_http_server_is_one(host):
    with pytest.raises(TrackingNotConfigured, match="http:// or https://"):
        from_connection(_conn(host=host, port=None), MlflowConfig(conn_id="m"), "e")


def test_mlflows_own_environment():
    env = {"MLFLOW_TRACKING_URI": "http://a:b@127.0.0.1:5001/", "MLFLOW_TRACKING_TOKEN": "t"}
    target = from_environment(MlflowConfig(), "e", env)
    assert (target.uri, target.username, target.password, target.token) == ("http://127.0.0.1:5001", "a", "b", "t")
    with pytest.raises(TrackingNotConfigured, match="MLFLOW_TRACKING_URI is not set"):
        from_environment(MlflowConfig(), "e", {})


def test_a_connection_needs_airflow():
    with pytest.raises(TrackingNotConfigured, match="read where Airflow runs"):
        resolve(MlflowConfig(conn_id="m"), "e", None)


def test_the_run_page():
    target = from_connection(_conn(), MlflowConfig(conn_id="m"), "e")
    assert target.run_url("3", "abc") == "http://mlflow.internal:5000/#/experiments/3/runs/abc"

"""The MLflow check before a run (issue 64, 2): a server address that cannot work is an error,
one this process cannot see is a warning naming what to set, and no finding holds a password."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from trialflow.config.tracking import MlflowConfig
from trialflow.tracking.preflight import MAX_CONNECTION_VALUE, check_tracking, connection_variable

BY_CONN = MlflowConfig(connId="mlflow_default")
BY_ENV = MlflowConfig()


def test_nothing_is_said_without_mlflow_or_with_a_good_address():
    assert check_tracking(None, {}) is None
    assert check_tracking(BY_ENV, {"MLFLOW_TRACKING_URI": "http://127.0.0.1:5000"}) is None
    good = {
        "AIRFLOW_CONN_MLFLOW_DEFAULT": "http://127.0.0.1:5000",
        "AIRFLOW_CONN_MLFLOW_JSON": json.dumps({"conn_type": "https", "host": "mlflow.example", "port": 443}),
        "AIRFLOW_CONN_MLFLOW_TOKEN": "http://:s3cret@mlflow.example:5000/prefix",
    }
    for conn_id in ("mlflow_default", "mlflow_json", "mlflow_token"):
        assert check_tracking(MlflowConfig(connId=conn_id), good) is None, conn_id


def test_a_server_not_visible_here_is_a_warning_that_says_what_to_set():
    finding = check_tracking(BY_CONN, {})
    assert finding is not None and not finding.error
    assert "mlflow.connId 'mlflow_default'" in finding.message
    assert "export AIRFLOW_CONN_MLFLOW_DEFAULT='http://host:5000'" in finding.message
    assert connection_variable("mlflow_default") == "AIRFLOW_CONN_MLFLOW_DEFAULT"
    finding = check_tracking(BY_ENV, {})
    assert finding is not None and not finding.error and "MLFLOW_TRACKING_URI is not set" in finding.message


@pytest.mark.parametrize(
    ("env", "said"),
    [
        ({"MLFLOW_TRACKING_URI": "htp//127.0.0.1"}, "MLFLOW_TRACKING_URI: expected an http:// or https:// address"),
        ({"MLFLOW_TRACKING_URI": "file:///tmp/mlruns"}, "got file://"),
        ({"AIRFLOW_CONN_MLFLOW_DEFAULT": "htp//127.0.0.1"}, "expected a connection URI"),
        ({"AIRFLOW_CONN_MLFLOW_DEFAULT": "http://:5000"}, "connection 'mlflow_default': expected an http://"),
        ({"AIRFLOW_CONN_MLFLOW_DEFAULT": "http://u:hunter2@h:port"}, "its port is not a number"),
        ({"AIRFLOW_CONN_MLFLOW_DEFAULT": '{"host": "h", '}, "not a connection URI and not JSON"),
        ({"AIRFLOW_CONN_MLFLOW_DEFAULT": "{" * 100_000}, f"over {MAX_CONNECTION_VALUE} characters"),
        ({"AIRFLOW_CONN_MLFLOW_DEFAULT": "[" * 5000 + "]" * 5000}, "expected a connection URI"),
        ({"AIRFLOW_CONN_MLFLOW_DEFAULT": "{" * 5000 + "}" * 5000}, "not a connection URI and not JSON"),
        ({"AIRFLOW_CONN_MLFLOW_DEFAULT": '{"conn_type": "http", "host": ""}'}, "expected an http://"),
    ],
)
def test_an_address_that_cannot_work_is_an_error_showing_no_secret(env, said):
    config = BY_ENV if "MLFLOW_TRACKING_URI" in env else BY_CONN
    finding = check_tracking(config, env)
    assert finding is not None and finding.error and said in finding.message, finding
    assert "hunter2" not in finding.message and "127.0.0.1" not in finding.message


def _cli(tmp_path, command: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "config.yml"
    config.write_text(
        "searchSpace: {x: {_type: uniform, _value: [0, 1]}}\ntrialCommand: python t.py\n"
        "trialConcurrency: 1\nmaxTrialNumber: 1\ntuner: {name: Random}\ntrainingService: {platform: local}\n"
        "mlflow: {connId: mlflow_default}\n"
    )
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW_CONN_", "MLFLOW_"))}
    home = ["--home", str(tmp_path / "home")] if command == "run" else []
    return subprocess.run(
        [sys.executable, "-m", "trialflow.cli", command, str(config), *home],
        capture_output=True,
        text=True,
        timeout=60,
        env={**clean, **env},
    )


def test_validate_warns_of_a_connection_it_cannot_see_and_refuses_a_malformed_one(tmp_path):
    warned = _cli(tmp_path, "validate", {})
    assert warned.returncode == 0, warned.stderr
    assert "OK" in warned.stderr and "warning: mlflow.connId 'mlflow_default'" in warned.stderr
    refused = _cli(tmp_path, "validate", {"AIRFLOW_CONN_MLFLOW_DEFAULT": "http://u:hunter2@:5000"})
    assert refused.returncode == 1 and "mlflow: connection 'mlflow_default'" in refused.stderr, refused.stderr
    assert "hunter2" not in refused.stderr and "Traceback" not in refused.stderr


def test_run_refuses_a_malformed_address_before_starting_anything(tmp_path):
    refused = _cli(tmp_path, "run", {"AIRFLOW_CONN_MLFLOW_DEFAULT": "htp//127.0.0.1"})
    assert refused.returncode == 1 and "expected a connection URI" in refused.stderr, refused.stderr
    assert not (tmp_path / "home").exists()

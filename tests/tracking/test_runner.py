"""Tracking as the steps and the command line open it: from what the experiment's start step
recorded in the store (its config's ``mlflow`` key, no config file), the tracking server named
by an Airflow connection. ``trialflow sync-mlflow`` sends what a server that was down missed,
once, and says why it could not without a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest

from tests.helpers.mlflow_server import CONN_ID, PASSWORD, connection_env
from tests.helpers.tracked_store import EXPERIMENT, six_trials
from trialflow.store.experiment_store import ExperimentStore, sqlite_url
from trialflow.tracking.runner import Tracking, tracked, tracked_attrs
from trialflow.tracking.target import TrackingTarget

pytestmark = pytest.mark.slow


def _recorded(store, name: str) -> None:
    six_trials(store)
    store.set_experiment_attrs(
        EXPERIMENT,
        {
            "experiment_name": "digits",
            "optimize_mode": "maximize",
            "config": {
                "tuner": {"name": "TPE"},
                "trialConcurrency": 2,
                "maxTrialNumber": 6,
                "trainingService": {"platform": "local"},
                "searchSpace": {"x": {"_type": "uniform", "_value": [0, 1]}},
                "mlflow": {"connId": CONN_ID, "experimentName": name},
            },
        },
    )


def test_the_experiment_as_tracking_reads_it_from_the_store(tmp_path):
    store = ExperimentStore(sqlite_url(tmp_path / "s.db"))
    _recorded(store, "x")
    what = tracked(tracked_attrs(store, EXPERIMENT), EXPERIMENT, TrackingTarget("http://127.0.0.1:1", "x"))
    assert (what.facts.name, what.facts.dag_id, what.optimize_mode, what.platforms) == (
        "digits",
        "dag_track",
        "maximize",
        ("local",),
    )
    assert what.facts.settings["tuner"] == "TPE" and what.facts.settings["maxTrialNumber"] == 6
    store.set_experiment_attrs(EXPERIMENT, {"config": {"tuner": {"name": "TPE"}}})
    assert Tracking.open(store, EXPERIMENT, None) is None  # no mlflow key: nothing is logged


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trialflow.cli", *args],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, **env},
    )


def test_sync_mlflow_sends_what_is_missing_once(tmp_path, mlflow_server):
    store = ExperimentStore(sqlite_url(tmp_path / "s.db"))
    name = f"cli-{uuid.uuid4().hex[:8]}"
    _recorded(store, name)
    store_args = ("--store", sqlite_url(tmp_path / "s.db"))
    first = _cli("sync-mlflow", EXPERIMENT, *store_args, env=connection_env(mlflow_server.port))
    assert first.returncode == 0, first.stderr
    assert (
        "7 MLflow run(s) brought up to date" in first.stdout and f"{mlflow_server.url}/#/experiments/" in first.stdout
    )
    again = _cli("sync-mlflow", EXPERIMENT, *store_args, env=connection_env(mlflow_server.port))
    assert again.returncode == 0 and "0 MLflow run(s)" in again.stdout
    client = mlflow_server.client()
    runs = client.search_runs([client.get_experiment_by_name(name).experiment_id])
    assert len(runs) == 7
    assert PASSWORD not in first.stdout + first.stderr


def test_sync_mlflow_says_why_not_without_a_traceback(tmp_path):
    store = ExperimentStore(sqlite_url(tmp_path / "s.db"))
    _recorded(store, "down")
    store_args = ("--store", sqlite_url(tmp_path / "s.db"))
    down = _cli("sync-mlflow", EXPERIMENT, *store_args, env=connection_env(1))
    assert down.returncode == 1 and "did not answer" in down.stderr and "Traceback" not in down.stderr
    assert PASSWORD not in down.stderr
    unknown = _cli("sync-mlflow", "enothere", *store_args, env={})
    assert unknown.returncode == 1 and "no experiment 'enothere'" in unknown.stderr
    missing = _cli("sync-mlflow", EXPERIMENT, *store_args, env={f"AIRFLOW_CONN_{CONN_ID.upper()}": ""})
    assert missing.returncode == 1 and "Traceback" not in missing.stderr, missing.stderr


def test_a_tracking_server_not_reached_from_here_is_said_on_the_pages_once(tmp_path):
    """Issue 64, 2: an mlflow.connId missing where the steps run made a run "success" with
    nothing in MLflow and a warning in one task's log only. The experiment now says it (the
    pages read it: trialflow.queries.tracking), once, until a pass reaches the server."""
    from trialflow.queries.tracking import experiment_tracking
    from trialflow.steering.base import history
    from trialflow.tracking.runner import open_tracking

    store = ExperimentStore(sqlite_url(tmp_path / "s.db"))
    _recorded(store, "nowhere")
    for _ in range(2):  # each step that opens it: the start, the watch, the trials
        assert open_tracking(store, EXPERIMENT, None) is None  # no Airflow here to read connections
    shown = experiment_tracking(store.engine, EXPERIMENT)
    assert shown is not None and shown["away"] is not None
    assert shown["away"]["error"].startswith(f"mlflow.connId {CONN_ID!r} is an Airflow connection")
    said = [entry for entry in history(store, EXPERIMENT) if entry["action"] == "MLflow not reached"]
    assert len(said) == 1 and CONN_ID in said[0]["detail"]
    assert PASSWORD not in str(shown) + str(said)


def test_a_trial_start_is_told_its_mlflow_run_from_the_attributes_the_start_read(tmp_path, mlflow_server, monkeypatch):
    """The start reads tracking's attributes with its own (one store call, StartTracking.reads):
    what TrialStartTracking is handed is all it reads of the experiment."""
    from trialflow.tracking.runner import TrialStartTracking

    store = ExperimentStore(sqlite_url(tmp_path / "s.db"))
    name = f"start-{uuid.uuid4().hex[:8]}"
    _recorded(store, name)
    config = store.experiment_attr(EXPERIMENT, "config")
    store.set_experiment_attrs(EXPERIMENT, {"config": {**config, "mlflow": {"experimentName": name}}})
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server.url)
    sink = TrialStartTracking(store, EXPERIMENT, None)
    attrs = store.experiment_attrs_named(EXPERIMENT, sink.reads)
    assert set(attrs) == {"config", "dag_id", "experiment_name", "optimize_mode"}  # no run's window
    storage_id = store.find_trial_id(EXPERIMENT, 5)  # the one still running
    env = sink.trial_env(storage_id, attrs)
    run = mlflow_server.client().get_run(env["MLFLOW_RUN_ID"])
    assert run.info.experiment_id == env["MLFLOW_EXPERIMENT_ID"] and env["MLFLOW_TRACKING_URI"] == mlflow_server.url
    assert run.data.tags.get("mlflow.parentRunId")  # nested under the experiment's run
    assert sink.trial_env(storage_id, {"experiment_name": name}) == {}  # read no mlflow key: not tracked

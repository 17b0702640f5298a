"""Hostile parameters and results on their way to MLflow (a real ``mlflow server``): names MLflow
would refuse (path tricks, its forbidden characters, 400 characters, newlines), values past its
limits, thousands of parameters, huge and odd numbers, secrets inside values. MLflow refuses a
whole batch for one bad name, so each is made one it accepts before it is sent: the server
takes every run, nothing secret arrives, nothing is longer than MLflow allows."""

from __future__ import annotations

import time
import uuid

import pytest

from tests.helpers.mlflow_server import steps, tracked_runs
from tests.helpers.tracked_store import EXPERIMENT, tracked_settings
from trialflow.platforms.base import TrialStatus
from trialflow.store.experiment_store import TASK_ATTR
from trialflow.tracking.mlflow_rest import MlflowRest
from trialflow.tracking.sync import sync_experiment
from trialflow.tracking.target import TrackingTarget
from trialflow.trial.protocol import Metric

pytestmark = pytest.mark.slow

HOSTILE = {
    "../../etc/passwd": 1,
    "lr@rate": 1e308,
    "p" * 400: "long name",
    "new\nline": "x",
    "名前": "値",
    "cmd": "curl -H 'Authorization: Bearer sk-abc123' --token=hunter2 http://svc:pw-secret@db.internal/x",
    "huge": "y" * 100_000,
    "int": 10**30,
    "nested": {"deep": {"deeper": {"_name": "a/../b", "v": -0.0}}},
    **{f"many{i}": i for i in range(1200)},
}


def test_hostile_parameters_and_results_reach_mlflow_as_it_accepts_them(store, mlflow_server):
    name = f"hostile-{uuid.uuid4().hex[:8]}"
    store.open_experiment(EXPERIMENT, "maximize")
    store.set_experiment_attrs(EXPERIMENT, {"dag_id": "dag_track"})
    from tests.helpers.filled_store import RANDOM, SPACE
    from trialflow.tuning.asker import ask

    asked = ask(store, EXPERIMENT, 0, f"{EXPERIMENT}-0000", RANDOM, SPACE)
    store.set_status(asked.storage_id, TrialStatus.RUNNING, started_at=time.time(), parameters=HOSTILE)
    store.set_attrs(asked.storage_id, **{TASK_ATTR: {"dag_id": "d" * 300, "run_id": "r\n", "task_id": "t"}})
    store.record_metrics(asked.storage_id, [Metric("PERIODICAL", s, 1e300 if s else -1e-300) for s in range(3)])
    final = {"default": 0.5, "../up": 1.0, "x" * 300: 2.0, "text": "not a number", "flag": True}
    store.record_metrics(asked.storage_id, [Metric("FINAL", 0, final)])
    store.finish(asked.storage_id, TrialStatus.SUCCEEDED, final)
    report = sync_experiment(store, tracked_settings(name), MlflowRest(TrackingTarget(mlflow_server.url, name)))
    assert (report.error, report.pending) == (None, 0)
    _, (run,) = tracked_runs(mlflow_server, name)
    params, metrics = run.data.params, run.data.metrics
    assert len(params) == 500  # bounded per trial
    assert all(len(k) <= 250 and len(v) <= 6000 for k, v in params.items())
    assert "hunter2" not in params["cmd"] and "pw-secret" not in params["cmd"] and "sk-abc123" not in repr(params)
    assert params["huge"].endswith("…") and params["名前"] == "値"
    assert params["_/_/etc/passwd"] == "1" and params["lr_rate"] == "1e+308" and params["int"] == str(10**30)
    assert params["nested/deep/deeper/_name"] == "a/../b"  # a value is a value
    assert steps(mlflow_server, run) == [(0, -1e-300), (1, 1e300), (2, 1e300)]
    assert metrics["final"] == 0.5 and metrics["final/_/up"] == 1.0
    assert (
        [k for k in metrics if k.startswith("final/x")] and "final/text" not in metrics and "final/flag" not in metrics
    )
    assert all(len(v) <= 8000 for v in run.data.tags.values())
    # the task identity that was not one is left out, not sent broken
    assert "trialflow.dag_id" not in run.data.tags

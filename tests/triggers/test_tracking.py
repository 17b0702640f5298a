"""TrackingTrigger in an event loop, against a real store and a real ``mlflow server``: it ends
once MLflow has every result, keeps trying while the server is away, and past its time says
what is kept and how to send it (never an error: tracking never fails a run)."""

from __future__ import annotations

import asyncio
import json
import time
import uuid

import pytest

from tests.helpers.mlflow_server import connection_env, tracked_runs
from tests.helpers.tracked_store import EXPERIMENT, six_trials
from trialflow.store.experiment_store import ExperimentStore, sqlite_url
from trialflow.triggers import tracking as tracking_trigger
from trialflow.triggers.tracking import TrackingTrigger

pytestmark = pytest.mark.slow


def _store(tmp_path, monkeypatch, name: str, port: int) -> ExperimentStore:
    url = sqlite_url(tmp_path / "store.db")
    monkeypatch.setenv(
        "AIRFLOW_CONN_TRIALFLOW_TEST", json.dumps({"conn_type": "trialflow", "extra": {"storage_url": url}})
    )
    for key, value in connection_env(port).items():
        monkeypatch.setenv(key, value)
    store = ExperimentStore(url)
    six_trials(store)
    store.set_experiment_attrs(
        EXPERIMENT, {"config": {"mlflow": {"connId": "trialflow_mlflow", "experimentName": name}}}
    )
    return store


def _events(trigger: TrackingTrigger) -> list:
    async def collect() -> list:
        return [event async for event in trigger.run()]

    return asyncio.run(asyncio.wait_for(collect(), 120))


def test_it_ends_once_mlflow_has_everything(tmp_path, monkeypatch, mlflow_server):
    name = f"trig-{uuid.uuid4().hex[:8]}"
    _store(tmp_path, monkeypatch, name, mlflow_server.port)
    trigger = TrackingTrigger(
        store_conn_id="trialflow_test", experiment_id=EXPERIMENT, status="FINISHED", until=time.time() + 60
    )
    (event,) = _events(trigger)
    assert event.payload == {"status": "DONE", "sent": 7}
    parent, runs = tracked_runs(mlflow_server, name)
    assert parent.info.status == "FINISHED" and len(runs) == 6


def test_past_its_time_it_says_what_is_kept(tmp_path, monkeypatch):
    _store(tmp_path, monkeypatch, "down", 1)  # nothing listens on port 1
    monkeypatch.setattr(tracking_trigger, "FIRST_PAUSE", 0.2)
    trigger = TrackingTrigger(
        store_conn_id="trialflow_test", experiment_id=EXPERIMENT, status="FINISHED", until=time.time() + 1
    )
    started = time.monotonic()
    (event,) = _events(trigger)
    assert event.payload["status"] == "GAVE_UP" and time.monotonic() - started < 30
    assert f"trialflow sync-mlflow {EXPERIMENT}" in event.payload["message"]


def test_an_experiment_that_names_no_server_is_said(tmp_path, monkeypatch):
    store = _store(tmp_path, monkeypatch, "x", 1)
    store.set_experiment_attrs(EXPERIMENT, {"config": {}})
    trigger = TrackingTrigger(
        store_conn_id="trialflow_test", experiment_id=EXPERIMENT, status="FINISHED", until=time.time()
    )
    (event,) = _events(trigger)
    assert event.payload["status"] == "NOT_TRACKED"

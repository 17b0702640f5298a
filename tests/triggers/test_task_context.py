"""What a trial task's start takes from Airflow's context (trialflow.triggers.task_context): in
the triggerer, one store per store URL and one experiment per config and run, for every trigger."""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace

from trialflow.store.experiment_store import sqlite_url
from trialflow.triggers.task_context import shared_experiment, shared_store

CONFIG = (
    "searchSpace: {x: {_type: uniform, _value: [0, 1]}}\n"
    f"trialCommand: {sys.executable} -c pass\ntrialConcurrency: 2\nmaxTrialNumber: 3\n"
    "tuner: {name: Random}\ntrainingService: {platform: local}\n"
)


def _context(run_id: str, conf: dict | None = None) -> dict:
    return {"dag": SimpleNamespace(dag_id="shared"), "run_id": run_id, "dag_run": SimpleNamespace(conf=conf or {})}


def test_the_triggers_of_a_store_share_it_until_its_connection_changes(tmp_path, monkeypatch):
    def point_at(name: str) -> None:
        url = sqlite_url(tmp_path / name)
        monkeypatch.setenv(
            "AIRFLOW_CONN_SHARED_STORE", json.dumps({"conn_type": "trialflow", "extra": {"storage_url": url}})
        )

    point_at("a.db")
    first = shared_store("shared_store")
    assert shared_store("shared_store") is first
    point_at("b.db")
    assert shared_store("shared_store") is not first and "b.db" in shared_store("shared_store").url


def test_the_triggers_of_a_run_share_its_experiment_and_an_edited_config_is_read_again(tmp_path):
    path = tmp_path / "config.yml"
    path.write_text(CONFIG)
    first = shared_experiment(str(path), _context("r1"))
    assert shared_experiment(str(path), _context("r1")) is first
    assert shared_experiment(str(path), _context("r2")) is not first  # another run
    assert shared_experiment(str(path), _context("r1", {"experiment_id": "eother"})) is not first  # its conf
    path.write_text(CONFIG.replace("maxTrialNumber: 3", "maxTrialNumber: 30"))
    edited = shared_experiment(str(path), _context("r1"))
    assert edited is not first and edited.config.max_trial_number == 30

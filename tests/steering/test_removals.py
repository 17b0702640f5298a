"""Removing an ended experiment's checkpoints and artifacts (trialflow.steering.removals and
`trialflow remove-artifacts`): refused while a run goes on, for an unknown experiment and for one
that keeps none; afterwards every file of it is gone from its store, another experiment's stay,
and the history says who removed how many."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trialflow import steering
from trialflow.config import load_config
from trialflow.config.checkpoints import default_folder
from trialflow.experiment import Experiment
from trialflow.runs import mark_ended, start_run
from trialflow.steering.removals import remove_artifacts
from trialflow.store.experiment_store import ExperimentStore, sqlite_url


def _experiment(tmp_path: Path, store: ExperimentStore, experiment_id: str, checkpoints: bool = True) -> Experiment:
    (tmp_path / "c.yml").write_text(
        "searchSpace: {x: {_type: uniform, _value: [0, 1]}}\ntrialCommand: 'true'\ntrialConcurrency: 1\n"
        "maxTrialNumber: 1\ntuner: {name: Random}\ntrainingService: {platform: local}\n"
        + ("checkpoints: {}\n" if checkpoints else "")
    )
    experiment = Experiment(load_config(tmp_path / "c.yml"), experiment_id, tmp_path / "work")
    start_run(experiment, store, "dag_rm", "r1", {})
    return experiment


def _kept(experiment: Experiment) -> Path:
    folder = default_folder(experiment.workdir) / experiment.experiment_id / "t-0000" / "checkpoints" / "000000001"
    folder.mkdir(parents=True)
    (folder / "model.bin").write_bytes(b"w" * 10)
    (folder.parent.parent / "artifacts").mkdir()
    (folder.parent.parent / "artifacts" / "model.pkl").write_bytes(b"m")
    return default_folder(experiment.workdir) / experiment.experiment_id


def _open(where):
    from trialflow.hooks.artifact_store import store_root

    return store_root(where.url, where.conn_id)


def test_an_ended_experiments_files_are_removed_and_the_history_says_so(tmp_path):
    store = ExperimentStore(sqlite_url(tmp_path / "store.db"))
    experiment = _experiment(tmp_path, store, "erm1")
    files = _kept(experiment)
    other = default_folder(experiment.workdir) / "erm2" / "kept.bin"
    other.parent.mkdir(parents=True)
    other.write_bytes(b"x")
    with pytest.raises(steering.ActionRefused, match="still running"):
        remove_artifacts(store, "erm1", "ann", _open)
    assert (files / "t-0000" / "artifacts" / "model.pkl").exists()
    mark_ended(experiment, store, "r1")
    removed = remove_artifacts(store, "erm1", "ann", _open)
    assert removed.files == 2 and removed.url.startswith("file://")
    assert not files.exists() and other.exists()  # only this experiment's prefix
    (entry,) = [h for h in steering.history(store, "erm1") if h["action"] == "remove artifacts"]
    assert entry["by"] == "ann" and entry["detail"].startswith("2 file(s) from file://")


def test_unknown_and_keeping_nothing_are_refused(tmp_path):
    store = ExperimentStore(sqlite_url(tmp_path / "store.db"))
    with pytest.raises(steering.UnknownTarget):
        remove_artifacts(store, "nope", "ann", _open)
    keeps_none = _experiment(tmp_path, store, "erm3", checkpoints=False)
    mark_ended(keeps_none, store, "r1")
    with pytest.raises(steering.ActionRefused, match="keeps no checkpoints or artifacts"):
        remove_artifacts(store, "erm3", "ann", _open)


@pytest.mark.slow  # the command in a Python of its own, importing Airflow
def test_the_command_removes_and_says_how_many(tmp_path):
    store = ExperimentStore(sqlite_url(tmp_path / "experiments.db"))
    experiment = _experiment(tmp_path, store, "erm4")
    files = _kept(experiment)
    command = [sys.executable, "-m", "trialflow.cli", "remove-artifacts", "erm4", "--home", str(tmp_path)]
    refused = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 1 and "still running" in refused.stderr and "Traceback" not in refused.stderr
    mark_ended(experiment, store, "r1")
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "removed 2 checkpoint and artifact file(s)" in done.stdout and not files.exists()


@pytest.mark.slow  # the command in a Python of its own, importing Airflow
@pytest.mark.parametrize(
    ("url", "said"),
    [
        # a scheme whose provider is not installed here (the dev group has no Google provider)
        ("gs://team-models/tuning", "apache-airflow-providers-google"),
        # a store that does not answer (an S3 endpoint nobody listens on): its SDK's own error
        ("s3://team-models/tuning", "the artifact store could not be reached; nothing was removed"),
    ],
)
def test_a_store_that_cannot_be_opened_is_said_without_a_traceback(tmp_path, url, said):
    store = ExperimentStore(sqlite_url(tmp_path / "experiments.db"))
    experiment = _experiment(tmp_path, store, "erm5")
    mark_ended(experiment, store, "r1")
    store.set_experiment_attrs("erm5", {"artifacts": {"url": url, "conn_id": "models_store"}})
    command = [sys.executable, "-m", "trialflow.cli", "remove-artifacts", "erm5", "--home", str(tmp_path)]
    nobody = {"endpoint_url": "http://127.0.0.1:9", "config_kwargs": {"retries": {"max_attempts": 1}}}
    connection = {"conn_type": "aws", "login": "k", "password": "s3-secret-value", "extra": nobody}
    env = {**os.environ, "AIRFLOW_CONN_MODELS_STORE": json.dumps(connection)}
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert said in done.stderr and "s3-secret-value" not in done.stderr, done.stderr
    assert [h for h in steering.history(store, "erm5") if h["action"] == "remove artifacts"] == []

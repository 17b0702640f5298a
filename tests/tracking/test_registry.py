"""A person's approval registers the best trial's model in MLflow's model registry (a real
``mlflow server``): the model's bytes copied into the trial's run and registered from there, the
version saying who approved it and when; a retried registration finds its version."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from tests.helpers.tracked_store import EXPERIMENT, six_trials
from trialflow.tracking.mlflow_rest import MlflowRest
from trialflow.tracking.registry import Approval, NotRegistered, register_model
from trialflow.tracking.runner import Tracking
from trialflow.tracking.target import TrackingTarget

pytestmark = pytest.mark.slow


def _tracking(store, url: str, model: str | None) -> Tracking:
    target = TrackingTarget(url, f"reg-{uuid.uuid4().hex[:8]}", registered_model=model)
    store.set_experiment_attrs(EXPERIMENT, {"config": {"tuner": {"name": "Random"}}, "optimize_mode": "maximize"})
    return Tracking(store, EXPERIMENT, target, MlflowRest(target))


def test_an_approval_registers_a_version_from_the_best_trials_run(store, mlflow_server, tmp_path):
    six_trials(store)
    model = f"digits-{uuid.uuid4().hex[:6]}"
    tracking = _tracking(store, mlflow_server.url, model)
    approval = Approval("alice", "2026-11-28T10:00:00+00:00", "final_model/manual__1")
    made = register_model(
        tracking, 4, "model.pkl", b"\x80pickled-model", approval, artifact_url="abfs://kept/x/model.pkl"
    )
    client = mlflow_server.client()
    version = client.get_model_version(model, made.version)
    assert version.run_id == tracking.run_ids()["4"] == made.run_id
    assert version.tags["trialflow.approved_by"] == "alice"
    assert version.tags["trialflow.approved_at"] == "2026-11-28T10:00:00+00:00"
    assert version.tags["trialflow.artifact"] == "abfs://kept/x/model.pkl"
    assert "alice" in version.description
    copied = Path(client.download_artifacts(made.run_id, "trialflow/model/model.pkl", str(tmp_path)))
    assert copied.read_bytes() == b"\x80pickled-model"
    assert made.source == f"runs:/{made.run_id}/trialflow/model"  # a folder: models:/ downloads it
    # the task retried: the same version, not a second one
    assert register_model(tracking, 4, "model.pkl", b"\x80pickled-model", approval).version == made.version
    later = register_model(
        tracking, 4, "model.pkl", b"\x80pickled-model", Approval("bob", "x", "final_model/manual__2")
    )
    assert int(later.version) == int(made.version) + 1


def test_without_a_name_nothing_is_registered(store, mlflow_server):
    six_trials(store)
    tracking = _tracking(store, mlflow_server.url, None)
    with pytest.raises(NotRegistered, match="registeredModel"):
        register_model(tracking, 4, "model.pkl", b"x", Approval("a", "b", "c"))


def test_a_flavored_version_is_an_mlflow_model_that_mlflow_loads_and_predicts_with(
    store, mlflow_server, tmp_path, monkeypatch
):
    """Issue 64, 6: a version whose source was one file downloaded as an empty folder from
    ``models:/`` and ``mlflow.pyfunc.load_model`` failed (no MLmodel). With ``flavor="sklearn"``
    the version is a folder holding the trial's pickled estimator and its MLmodel (written
    without unpickling it): MLflow's own loaders, pointed at the registry, predict with it."""
    import pickle

    import mlflow
    import numpy as np
    from sklearn.linear_model import LogisticRegression

    six_trials(store)
    model = f"digits-{uuid.uuid4().hex[:6]}"
    tracking = _tracking(store, mlflow_server.url, model)
    features = np.array([[0.0, 1.0], [1.0, 0.0], [0.2, 0.9], [0.9, 0.1]])
    estimator = LogisticRegression().fit(features, [0, 1, 0, 1])
    made = register_model(
        tracking, 4, "model.pkl", pickle.dumps(estimator), Approval("alice", "x", "f/1"), flavor="sklearn"
    )
    assert mlflow_server.client().get_model_version(model, made.version).tags["trialflow.flavor"] == "sklearn"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server.url)
    monkeypatch.setenv("MLFLOW_ALLOW_PICKLE_DESERIALIZATION", "true")  # MLflow's own guard for pickles
    uri = f"models:/{model}/{made.version}"
    folder = Path(mlflow.artifacts.download_artifacts(uri, dst_path=str(tmp_path / "dl")))
    # what was registered, and the file MLflow's download adds itself
    assert sorted(p.name for p in folder.iterdir()) == ["MLmodel", "model.pkl", "registered_model_meta"]
    loaded = mlflow.pyfunc.load_model(uri)
    assert list(loaded.predict(features)) == list(estimator.predict(features))
    assert list(mlflow.sklearn.load_model(uri).predict_proba(features)[:, 1]) == pytest.approx(
        list(estimator.predict_proba(features)[:, 1])
    )
    with pytest.raises(NotRegistered, match="flavor 'tensorflow': trialflow writes the MLmodel of sklearn"):
        register_model(tracking, 4, "model.pkl", b"x", Approval("bob", "y", "f/2"), flavor="tensorflow")

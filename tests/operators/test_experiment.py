"""PublishBestOperator's look at the best trial's artifacts, on a real store (SQLite through an
Airflow connection) and a real artifact store (a folder through ObjectStoragePath): listed when
kept, and a store that refuses (a manifest naming a path outside) publishes the parameters
without them, said in the task's log, never a failed publish."""

from __future__ import annotations

import json

from trialflow.checkpoints.artifacts import TrialArtifacts
from trialflow.operators.experiment import PublishBestOperator
from trialflow.store.experiment_store import ExperimentStore, sqlite_url


def _setup(tmp_path, monkeypatch):
    from airflow.sdk import Asset

    url = sqlite_url(tmp_path / "store.db")
    monkeypatch.setenv("AIRFLOW_CONN_TF_PUBLISH", json.dumps({"conn_type": "trialflow", "extra": {"storage_url": url}}))
    store = ExperimentStore(url)
    store.open_experiment("epub")
    folder = tmp_path / "artifacts"
    store.set_experiment_attrs("epub", {"artifacts": {"url": f"file://{folder}", "conn_id": None}})
    trial = tmp_path / "trial"
    (trial / "artifacts").mkdir(parents=True)
    (trial / "artifacts" / "model.pkl").write_bytes(b"m" * 10)
    TrialArtifacts(folder, "epub", "epub-0003").keep(trial)
    operator = PublishBestOperator(task_id="publish", asset=Asset("trialflow/d/best"), store_conn_id="tf_publish")
    summary = {"experiment_id": "epub", "best": {"trial_id": "epub-0003"}, "study_best": None, "objectives": None}
    return operator, summary, folder


def test_the_best_trials_kept_artifacts_are_listed_for_the_event(tmp_path, monkeypatch):
    operator, summary, folder = _setup(tmp_path, monkeypatch)
    found = operator._artifacts_of_best(summary)
    assert found is not None and found.trial_id == "epub-0003" and found.store_url == f"file://{folder}"
    assert [(f.name, f.size) for f in found.files] == [("model.pkl", 10)]


def test_a_store_that_refuses_publishes_without_artifacts_and_says_why(tmp_path, monkeypatch, capfd):
    operator, summary, folder = _setup(tmp_path, monkeypatch)
    (folder / "epub" / "epub-0003" / "artifacts.manifest.json").write_text(
        '{"files": [{"name": "../../x", "size": 1, "sha256": "y"}]}'
    )
    assert operator._artifacts_of_best(summary) is None
    said = "".join(capfd.readouterr())  # the task's log (Airflow's structlog writes it out)
    assert "Publishing without the best trial's artifacts" in said and "leads outside" in said

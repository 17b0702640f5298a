"""A person's approval registers the best trial's model in MLflow's model registry.

The model a trial kept (its artifact in trialflow's artifact store) is copied into the trial's
own MLflow run, into the folder ``trialflow/<name without extension>/``, and registered from
that folder as a new version of the registered model (``runs:/<run>/trialflow/model``: MLflow
accepts a version's source inside the run it names; a local folder it does not), with the
MLmodel of its flavor where the DAG names one (trialflow.tracking.mlflow_model). The version
says who approved it and when, which experiment and trial it came from and where trialflow
keeps the original. Registering is
idempotent per approval: a retried task finds the version it made instead of making a second.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from trialflow.tracking.content import bounded, mlflow_name
from trialflow.tracking.runner import Tracking

#: The folder of a run's artifacts trialflow copies a registered model into.
ARTIFACT_FOLDER = "trialflow"
_TAG_VALUE = 5000


def model_folder(artifact_name: str) -> str:
    """The run's folder a registered model is copied into (the version's source): the file's
    name without its extension (``model.pkl`` -> ``model``)."""
    name = mlflow_name(artifact_name)
    stem = name.rsplit(".", 1)[0] if "." in name.strip(".") else name
    return stem or "model"


class NotRegistered(Exception):
    """The model could not be registered (said why); nothing half-registered is left behind
    that a retry would not finish."""


@dataclass(frozen=True)
class Approval:
    """Who approved, and when (ISO 8601), and the DAG run the approval was given in."""

    by: str
    at: str
    dag_run: str


def approval_of(response: Any, task_id: str, dag_run: str) -> Approval:
    """The person's answer an approval task returned (Airflow's ApprovalOperator: who answered,
    ``responded_by_user``, and when, ``responded_at``), or NotRegistered: an approval marked
    success without anyone answering (``dag.test(mark_success_pattern=...)``, the grid's "mark
    success") registered a model version tagged ``approved_by: unknown``, promoted with no
    approval at all."""
    answer = response if isinstance(response, Mapping) else {}
    user = answer.get("responded_by_user")
    by = user.get("name") or user.get("id") if isinstance(user, Mapping) else user
    at = answer.get("responded_at")
    if not by or not at:
        raise NotRegistered(
            f"the approval task {task_id!r} holds no person's answer (who and when): it was marked "
            "success without one, so nothing is registered; a person answers it in Required Actions"
        )
    when = at.isoformat() if hasattr(at, "isoformat") else str(at)
    return Approval(str(by)[:250], when[:64], dag_run)


@dataclass(frozen=True)
class RegisteredVersion:
    name: str
    version: str
    source: str
    run_id: str


def register_model(
    tracking: Tracking,
    trial_index: int,
    artifact_name: str,
    data: bytes,
    approval: Approval,
    model_name: str | None = None,
    artifact_url: str | None = None,
    flavor: str | None = None,
) -> RegisteredVersion:
    """Register trial ``trial_index``'s artifact ``artifact_name`` (its bytes: ``data``) as a
    new version of ``model_name`` (default: the config's ``mlflow.registeredModel``). The
    version's source is a folder of the run holding the file (``models:/`` URIs download it)
    and, with ``flavor`` (trialflow.tracking.mlflow_model.FLAVORS), its MLmodel: an MLflow
    Model that ``mlflow.pyfunc.load_model`` and MLflow's serving load."""
    name = model_name or tracking.target.registered_model
    if not name:
        raise NotRegistered("no registered model's name: set mlflow.registeredModel in the config, or pass one")
    described = None
    if flavor is not None:
        from trialflow.tracking.mlflow_model import MLMODEL, UnknownFlavor, mlmodel

        try:
            described = (MLMODEL, mlmodel(flavor, mlflow_name(artifact_name), len(data)))
        except UnknownFlavor as exc:
            raise NotRegistered(str(exc)) from None
    key = str(trial_index)
    run_id = tracking.run_ids().get(key)
    if run_id is None:  # its run not made yet (the server was away): one pass makes it
        tracking.sync(budget=60.0)
        run_id = tracking.run_ids().get(key)
    if run_id is None:
        raise NotRegistered(f"trial {trial_index} has no MLflow run yet: the tracking server did not take it")
    client = tracking.client
    approval_key = bounded(f"{approval.dag_run}", _TAG_VALUE)
    folder = f"{ARTIFACT_FOLDER}/{model_folder(artifact_name)}"
    source = f"runs:/{run_id}/{folder}"
    for found in client.model_versions(name, run_id):
        marks = {t.get("key"): t.get("value") for t in found.get("tags") or [] if isinstance(t, dict)}
        if marks.get("trialflow.approval") == approval_key:
            return RegisteredVersion(name, str(found.get("version")), str(found.get("source")), run_id)
    artifacts = client.run_artifact_uri(run_id)
    client.upload(artifacts, f"{folder}/{mlflow_name(artifact_name)}", data)
    if described is not None:  # last: a folder with its MLmodel holds the model it describes
        client.upload(artifacts, f"{folder}/{described[0]}", described[1])
    client.registered_model(name)
    tags: dict[str, str] = {
        "trialflow.approval": approval_key,
        "trialflow.approved_by": bounded(approval.by, _TAG_VALUE),
        "trialflow.approved_at": bounded(approval.at, _TAG_VALUE),
        "trialflow.experiment_id": tracking.experiment_id,
        "trialflow.trial_index": key,
    }
    if artifact_url:
        tags["trialflow.artifact"] = bounded(artifact_url, _TAG_VALUE)
    if flavor is not None:
        tags["trialflow.flavor"] = flavor
    description = f"Approved by {approval.by} at {approval.at} (trialflow experiment {tracking.experiment_id})"
    version = client.model_version(name, source, run_id, tags, bounded(description, _TAG_VALUE))
    return RegisteredVersion(name, version, source, run_id)

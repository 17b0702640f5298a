"""What a trial task's start takes from Airflow's context, wherever the start runs: in a worker
(trialflow.operators.trial) or in the triggerer (trialflow.triggers.trial_start): the experiment
the DAG run drives, and where the trial is tracked. Here, below both shells, so they share it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trialflow.hooks import airflow_connections

if TYPE_CHECKING:
    from airflow.sdk import Context

    from trialflow.experiment import Experiment
    from trialflow.store.experiment_store import ExperimentStore


def experiment_for(config_path: str, context: Context, check: bool = False, group: str | None = None) -> Experiment:
    """The experiment this DAG run drives (a run's conf may name another: ``experiment_id``);
    ``group``: the task group it belongs to, in a DAG that may hold several. Trial tasks only
    load the config; DAG parsing and the start step checked it in full."""
    from trialflow.experiment import Experiment

    conf = getattr(context.get("dag_run"), "conf", None) or {}
    return Experiment.for_run(
        config_path, context["dag"].dag_id, context["run_id"], conf=conf, check=check, group=group
    )


def tracking_for(experiment: Any, context: Context, store: ExperimentStore) -> dict[str, Any]:
    """What a trial's MLflow run links back to: the task instance, the pages, Airflow's masker
    (only for an experiment that names MLflow)."""
    if experiment.config.mlflow is None:
        return {}
    from trialflow.from_airflow.secrets import masked_text
    from trialflow.tracking.content import TaskIdentity
    from trialflow.tracking.runner import TrialStartTracking
    from trialflow.ui.links import tracking_links

    ti = context["ti"]
    task = TaskIdentity(
        ti.dag_id, ti.run_id, ti.task_id, int(ti.map_index if ti.map_index is not None else -1), int(ti.try_number)
    )
    links = tracking_links(experiment.experiment_id)
    tracking = TrialStartTracking(store, experiment.experiment_id, airflow_connections(), links, masked_text)
    return {"task": task, "tracking": tracking}

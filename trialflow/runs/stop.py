"""A DAG run stopped from outside (Airflow's mark failed on the run, Ctrl-C), and its trials cancelled. No Airflow."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from trialflow.experiment import Experiment
from trialflow.platforms.base import Connections, TrialStatus

if TYPE_CHECKING:
    from trialflow.store.experiment_store import ExperimentStore

log = logging.getLogger(__name__)


def stop_run(store: ExperimentStore, experiment_id: str, dag_id: str | None, run_id: str, by: str, reason: str) -> None:
    """A whole DAG run stopped (Airflow's mark failed on the run): it is marked in the store (no
    trial of it starts, the others are asked to stop, its history line written with the mark),
    and the experiment will not go on, so a trialConcurrency a person changed goes back to the
    config's for the DAG's next one. Every trial task of the run may call this: it marks once."""
    from trialflow import steering
    from trialflow.experiment import GROUP_ATTR
    from trialflow.store.concurrency_changes import clear, limits_key

    if dag_id:
        group = store.experiment_attr(experiment_id, GROUP_ATTR) if store.experiment_exists(experiment_id) else None
        clear(store.engine, limits_key(dag_id, group), experiment_id)
    try:
        steering.stop_runs(store, experiment_id, by, reason, [run_id], "stop run")
    except steering.ActionRefused as exc:  # a run without a window has nothing more to stop
        log.info("%s", exc)


def cancel_trials(
    experiment: Experiment,
    store: ExperimentStore,
    reason: str,
    connections: Connections | None = None,
    status: TrialStatus = TrialStatus.USER_CANCELED,
) -> int:
    """Stop every trial of the experiment still running, on its own platform, and close it in
    the store as ``status`` with ``reason`` (a trial that ended meanwhile keeps its outcome).
    Returns how many were stopped."""
    if not store.experiment_exists(experiment.experiment_id):
        return 0
    cancelled = 0
    for trial in store.active_trials(experiment.experiment_id):
        if trial.handle:
            platform = experiment.platform(int(trial.service_index or 0), connections)
            platform.cancel_sync(trial.handle, status, reason)
            store.finish(trial.storage_id, status, trial.final, reason)
            cancelled += 1
    return cancelled

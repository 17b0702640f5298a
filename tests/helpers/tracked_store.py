"""A store holding one tracked experiment's six trials, as the tracking tests read it: each
state NNI has (succeeded, early-stopped, failed, running), a person's added trial, curves of
several steps, and the Tracked settings a pass is given."""

from __future__ import annotations

import time

from tests.helpers.filled_store import RANDOM, SPACE
from trialflow.platforms.base import TrialStatus
from trialflow.store.experiment_store import TASK_ATTR
from trialflow.tracking.content import ExperimentFacts, LinkBack, TaskIdentity
from trialflow.tracking.sync import Tracked
from trialflow.trial.protocol import Metric
from trialflow.tuning.asker import ask

EXPERIMENT = "etrack0000000001"


def tracked_settings(name: str, status: str | None = None) -> Tracked:
    return Tracked(
        experiment_id=EXPERIMENT,
        mlflow_experiment=name,
        facts=ExperimentFacts(
            experiment_id=EXPERIMENT,
            name="digits <svc>",
            dag_id="dag_track",
            settings={"tuner": "Random", "maxTrialNumber": 6},
            page="http://airflow.example/plugin/trialflow?experiment=" + EXPERIMENT,
            status=status,
        ),
        optimize_mode="maximize",
        platforms=("local",),
        artifacts="abfs://kept",
        links=LinkBack(
            experiment_page="http://airflow.example/plugin/trialflow?experiment=" + EXPERIMENT,
            trial_page=lambda t: f"http://airflow.example/plugin/trialflow?dag_id={t.dag_id}&map_index={t.map_index}",
        ),
    )


def add_trial(store, index: int, curve: list[float], status: TrialStatus | None, final: float | None = None) -> int:
    asked = ask(store, EXPERIMENT, index, f"{EXPERIMENT}-{index:04d}", RANDOM, SPACE)
    task = TaskIdentity("dag_track", "manual__1", "trial", index, 1)
    store.set_status(asked.storage_id, TrialStatus.RUNNING, handle={"platform": "local"}, started_at=time.time())
    store.set_attrs(asked.storage_id, **{TASK_ATTR: task.to_attr()})
    store.record_metrics(asked.storage_id, [Metric("PERIODICAL", s, v) for s, v in enumerate(curve)])
    if status is not None:
        if final is not None:
            store.record_metrics(asked.storage_id, [Metric("FINAL", 0, final)])
        store.finish(asked.storage_id, status, final, "boom" if status == TrialStatus.FAILED else None)
    return asked.storage_id


def six_trials(store) -> None:
    store.open_experiment(EXPERIMENT, "maximize")
    store.set_experiment_attrs(EXPERIMENT, {"dag_id": "dag_track"})
    add_trial(store, 0, [0.1, 0.2, 0.3, 0.4, 0.5], TrialStatus.SUCCEEDED, 0.55)
    add_trial(store, 1, [0.05, 0.06, 0.07], TrialStatus.EARLY_STOPPED, 0.07)
    add_trial(store, 2, [0.2], TrialStatus.FAILED)
    # a person's trial, as the page's "add trial" queues it (trialflow.steering.asked_trials)
    store.enqueue(EXPERIMENT, {"lr": 0.01, "opt": {"_name": "adam"}, "act": "relu"}, {"by": "alice", "at": 1.0})
    add_trial(store, 3, [0.3, 0.6, 0.7], TrialStatus.SUCCEEDED, 0.75)
    add_trial(store, 4, [0.4, 0.8, 0.9, 0.95], TrialStatus.SUCCEEDED, 0.97)
    add_trial(store, 5, [0.1, 0.15], None)

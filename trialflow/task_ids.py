"""The tasks of an experiment, by id, in a DAG of its own or as a task group in the author's DAG.

experiment_dag puts them at the DAG's top (``trial``, ``start_experiment``...: the ids every
run, page and test has always used); an ExperimentTaskGroup puts the same tasks under its
group id (``tune_svc.trial``), as Airflow prefixes a group's tasks. Whatever finds a trial task
from outside (the api-server's listener, the run's watch, the end step) goes through here, so
one rule says which task is whose. No Airflow.
"""

from __future__ import annotations

START = "start_experiment"
TRIAL = "trial"
WATCH = "watch_trials"
END = "end_experiment"
CONTINUE = "continue_experiment"
PUBLISH = "publish_best"
#: An experiment tracked in MLflow: sends what the server has not taken yet, after the end step.
TRACK = "log_to_mlflow"


def task_id(name: str, group: str | None = None) -> str:
    """The full id of the experiment's task ``name`` (``group.name`` inside a task group)."""
    return name if group is None else f"{group}.{name}"


def trial_task_group(full_task_id: str) -> tuple[bool, str | None]:
    """(whether ``full_task_id`` is an experiment's trial task, the group it is in: None at a
    DAG's top). Groups nest (``outer.inner.trial``): the group id is everything before the last dot."""
    if full_task_id == TRIAL:
        return True, None
    group, dot, name = full_task_id.rpartition(".")
    if dot and name == TRIAL and group:
        return True, group
    return False, None

"""A person's click on a trial task, recorded in the store the moment Airflow's API takes it.

Airflow's buttons reach a trial through ``on_kill`` (the operator's in the worker, the
trigger's in the triggerer), and events can be lost: measured, a task marked failed just as
it handed over from its worker to the triggerer was set back to ``deferred`` by the
deferral that came a moment later; no on_kill ran, the trigger followed the trial to its
end, and Airflow ended the task "success". So the api-server, where the click arrives
(Airflow calls these listener hooks for a task instance's state set through its REST API or
the Grid, and for the tasks of a DAG run marked failed or success), also writes the stop
request beside the trial (trialflow.steering.stop_task_trial); whoever follows the trial acts
on it at its next poll, whatever state Airflow settles on. The run's watch and the end step
reconcile what is left (trialflow.runs.reconcile).

Registered by the plugin in the api-server only: Airflow's DAG bag refuses any task with
``end_from_trigger=True`` where a listener plugin is loaded, which must not happen to other
DAGs because trialflow is installed (trialflow.ui.plugin).
"""

from __future__ import annotations

import logging
from typing import Any

from airflow.listeners import hookimpl

from trialflow.lifecycle.task_states import TaskState

log = logging.getLogger(__name__)


def _stop(task_instance: Any, state: TaskState) -> None:
    """Write the stop request for the trial of a trial task a person set to ``state``; never
    raises (a listener's error must not fail the person's request)."""
    try:
        from trialflow.task_ids import trial_task_group

        is_trial, group = trial_task_group(str(getattr(task_instance, "task_id", "")))
        if not is_trial:
            return
        map_index = int(getattr(task_instance, "map_index", -1))
        if map_index < 0:
            return
        from trialflow import steering
        from trialflow.from_airflow.why_stopped import run_failed_clause
        from trialflow.lifecycle.task_states import marked_reason
        from trialflow.ui.access import action_store

        reason = marked_reason(state)  # on_kill's words, which the task's end reads back
        run = getattr(task_instance, "dag_run", None)
        whole_run = str(getattr(getattr(run, "state", None), "value", getattr(run, "state", ""))) == "failed"
        if whole_run:  # the DAG run was marked failed (its tasks with it): no trial of it starts
            reason += run_failed_clause(task_instance.run_id)
        store = action_store()
        asked = steering.stop_task_trial(
            store, task_instance.dag_id, task_instance.run_id, map_index, reason, group=group
        )
        if asked is None:
            return
        experiment_id, record = asked
        log.info("Trial %s asked to stop: %s", record.trial_id, reason)
        if whole_run:
            try:
                steering.stop_runs(store, experiment_id, "Airflow", reason, [task_instance.run_id], "stop run")
            except steering.ActionRefused:
                pass  # the run has no window: nothing more to stop
    except Exception:
        log.exception("could not record the stop of %s's trial", getattr(task_instance, "task_id", "?"))


@hookimpl
def on_task_instance_failed(previous_state: Any, task_instance: Any, error: Any) -> None:
    _stop(task_instance, "failed")


@hookimpl
def on_task_instance_success(previous_state: Any, task_instance: Any) -> None:
    _stop(task_instance, "success")


@hookimpl
def on_task_instance_skipped(previous_state: Any, task_instance: Any) -> None:
    _stop(task_instance, "skipped")

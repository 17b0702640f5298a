"""Why Airflow stopped a trial's task: a person's button, or a fault the trial must outlive.

The worker's ``on_kill`` runs on SIGTERM, and Airflow sends SIGTERM both when a person marks
the task failed, success or clears it (the server then answers the heartbeat with 409) and
when nobody asked: the api-server unreachable for too many heartbeats, the worker shutting
down. Only the first must cancel the trial; after the second the task is retried and its
retry re-attaches to the running job. The task instance's state, asked of Airflow at that
moment, tells the two apart: a person's action has moved it out of ``running``.

The triggerer's ``on_kill`` runs only after a person's action (Airflow calls it for nothing
else), so there the state only names the action in the trial's message.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trialflow.lifecycle.task_states import FROM_AIRFLOW, MARKED

if TYPE_CHECKING:
    from trialflow.lifecycle.submission import Submission
    from trialflow.platforms.base import TrainingPlatform

log = logging.getLogger(__name__)

#: Task instance states Airflow sets when nobody asked for a stop: keep the trial (a retry or
#: the task itself goes on following it).
NOT_A_PERSON = frozenset({"running", "deferred", "up_for_retry", "up_for_reschedule", "queued", "scheduled"})
#: How a person's action reads in the trial's message, by the task's new state.
ACTIONS: dict[str | None, str] = {
    "restarting": "its task was cleared",
    None: "its task was cleared",
    "removed": "its task was removed",
    "upstream_failed": "its task was marked upstream failed",
}
# and the states a person may choose, which the task keeps (trialflow.lifecycle.task_states)
ACTIONS.update((state, words) for state, words in MARKED.items())
#: Seconds the worker waits for Airflow's answer (Airflow escalates SIGTERM to SIGKILL 5 s after).
ASK_TIMEOUT = 3.0
#: The same in the triggerer, which gives on_kill 30 s ([triggerer] on_kill_timeout) and where a
#: busy supervisor answered in more than 3 s in the full suite (the message then said less).
TRIGGER_ASK_TIMEOUT = 10.0
#: How long a task marked failed waits before it asks its run's state again (see ask_states).
RUN_STATE_SETTLE_SECONDS = 0.5


@dataclass(frozen=True)
class TaskRef:
    """One task instance, as Airflow's execution API names it."""

    dag_id: str
    run_id: str
    task_id: str
    map_index: int = -1

    @classmethod
    def of(cls, ti: Any) -> TaskRef | None:
        try:
            map_index = getattr(ti, "map_index", None)
            return cls(ti.dag_id, ti.run_id, ti.task_id, -1 if map_index is None else int(map_index))
        except (AttributeError, TypeError, ValueError):
            return None


@dataclass(frozen=True)
class AirflowStop:
    """A person's stop from Airflow: the trial's message, and whether it stopped the whole DAG
    run (then no trial of the run may start any more, and the experiment says so)."""

    reason: str
    whole_run: bool = False


def reason_for(
    ti_state: str | None, dag_run_state: str | None, run_id: str, *, known_person: bool = False
) -> AirflowStop | None:
    """What stopped the task, or None when no person asked for it. ``known_person``: Airflow
    said it was a person (the trigger's on_kill); a task that is already queued, running or
    deferred again is then a cleared one's next try."""
    if ti_state in NOT_A_PERSON:
        if not known_person:
            return None
        ti_state = "restarting"
    reason = FROM_AIRFLOW + ACTIONS.get(ti_state, f"its task was set to {ti_state}")
    if dag_run_state == "failed":
        # Marking the run failed marks its running tasks failed; a run whose last task a person
        # marked failed is failed too by the time the worker asks: the message says both facts.
        return AirflowStop(reason + run_failed_clause(run_id), whole_run=True)
    return AirflowStop(reason)


def run_failed_clause(run_id: str) -> str:
    """What a stop reason adds when the task's whole DAG run was failed (the api-server's
    listener and on_kill write it alike: a reader tells a run's stop from one task's by it)."""
    return f"; DAG run {run_id} is failed"


def as_recorded(stop: AirflowStop, requested: str | None, run_id: str) -> AirflowStop:
    """The stop to record: the one the api-server's listener wrote as it took the click, where
    there is one from Airflow, else ``stop`` (what on_kill asked Airflow afterwards).

    Both see one click, and whichever closes the trial first writes its message: the listener
    saw the click inside the request that made it, on_kill asks a moment later and can read
    the run's state before the run is marked (seen in a full suite under load: the follower
    acted on the listener's "...; DAG run ... is failed" while on_kill closed the trial with
    "its task was marked failed"). One click, one message; where on_kill alone saw the whole
    run failed, it says more and stays."""
    if not requested or not requested.startswith(FROM_AIRFLOW):
        return stop
    recorded = AirflowStop(requested, whole_run=requested.endswith(run_failed_clause(run_id)))
    return stop if stop.whole_run and not recorded.whole_run else recorded


#: The trigger's message when Airflow cannot be asked which action it was.
SOME_ACTION = AirflowStop(FROM_AIRFLOW + "its task was marked failed, success or cleared")


def ask_states(ref: TaskRef) -> tuple[str | None, str | None]:
    """(task instance state, DAG run state) from Airflow's execution API, through the task's or
    the trigger's supervisor. Raises when Airflow cannot be asked."""
    from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

    states = RuntimeTaskInstance.get_task_states(
        dag_id=ref.dag_id, map_index=ref.map_index, task_ids=[ref.task_id], run_ids=[ref.run_id]
    )
    key = ref.task_id if ref.map_index < 0 else f"{ref.task_id}_{ref.map_index}"
    ti_state = state_text(states.get(ref.run_id, {}).get(key))
    dag_run_state = state_text(RuntimeTaskInstance.get_dagrun_state(dag_id=ref.dag_id, run_id=ref.run_id))
    if ti_state == "failed" and dag_run_state == "running":
        # A run marked failed has its running tasks marked first: asked at that instant (seen
        # once in a full suite under load), the run still read "running" and the trial's message
        # lost "DAG run ... is failed". One more look, a moment later, says which it was.
        time.sleep(RUN_STATE_SETTLE_SECONDS)
        dag_run_state = state_text(RuntimeTaskInstance.get_dagrun_state(dag_id=ref.dag_id, run_id=ref.run_id))
    return ti_state, dag_run_state


def ask_trial_states(dag_id: str, run_id: str, task_id: str) -> dict[int, str | None]:
    """Every mapped instance of ``task_id`` in the run, map index -> state, from Airflow's
    execution API (one request; from a task or a trigger). Raises when Airflow cannot be asked."""
    from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

    from trialflow.config.units import whole_number  # here: the DAG file's parse imports no config models

    states = RuntimeTaskInstance.get_task_states(dag_id=dag_id, task_ids=[task_id], run_ids=[run_id])
    found: dict[int, str | None] = {}
    prefix = f"{task_id}_"
    for key, state in states.get(run_id, {}).items():
        index = whole_number(key[len(prefix) :]) if key.startswith(prefix) else None
        if index is not None:
            found[index] = state_text(state)
    return found


def state_text(state: Any) -> str | None:
    """A state as Airflow spells it: the API's enums print as ``DagRunState.FAILED``."""
    return None if state is None else str(getattr(state, "value", state))


def worker_kill_reason(ref: TaskRef | None) -> AirflowStop | None:
    """From the worker's ``on_kill``: the trial's message if a person stopped the task, None if
    not (or if Airflow cannot say: an api-server that does not answer is the fault the task is
    being stopped for, and a retry will re-attach to the trial).

    Asked from a thread with a time limit: ``on_kill`` runs in a signal handler, which may have
    interrupted the task's own request to its supervisor, whose channel is not re-entrant."""
    if ref is None:
        return None
    answer: list[tuple[str | None, str | None]] = []

    def ask() -> None:  # a thread of its own: see the docstring
        try:
            answer.append(ask_states(ref))
        except Exception as exc:
            log.warning("cannot ask Airflow why task %s was stopped: %s", ref.task_id, exc)

    thread = threading.Thread(target=ask, name="trialflow-on-kill", daemon=True)
    thread.start()
    thread.join(ASK_TIMEOUT)
    if not answer:
        log.warning("Airflow did not say why the task was stopped; the trial is left running for a retry")
        return None
    ti_state, dag_run_state = answer[0]
    return reason_for(ti_state, dag_run_state, ref.run_id)


async def trigger_kill_reason(ref: TaskRef | None) -> AirflowStop:
    """From the trigger's ``on_kill`` (always a person's action): which one, when Airflow says."""
    import asyncio

    if ref is None:
        return SOME_ACTION
    try:
        ti_state, dag_run_state = await asyncio.wait_for(asyncio.to_thread(ask_states, ref), TRIGGER_ASK_TIMEOUT)
    except Exception as exc:
        log.warning("cannot ask Airflow which action stopped task %s: %s", ref.task_id, exc)
        return SOME_ACTION
    return reason_for(ti_state, dag_run_state, ref.run_id, known_person=True) or SOME_ACTION


async def stop_from_airflow(
    submission: Submission,
    stop: AirflowStop,
    run_id: str,
    platform: TrainingPlatform | None = None,
    dag_id: str | None = None,
) -> bool:
    """Close the trial USER_CANCELED with the stop's reason and cancel its job; a stop of the whole
    DAG run also stops the run in the store (no trial of it starts, the others are asked)."""
    import asyncio

    from trialflow import steering
    from trialflow.hooks import airflow_connections
    from trialflow.hooks.experiment_store import ExperimentStoreHook
    from trialflow.lifecycle import trial_lifecycle

    store = await asyncio.to_thread(lambda: ExperimentStoreHook(submission.store_conn_id).get_conn())
    requested = await asyncio.to_thread(steering.stop_requested, store, submission.storage_id)
    stop = as_recorded(stop, requested, run_id)
    if platform is None:
        experiment = await asyncio.to_thread(submission.experiment)
        platform = experiment.platform(submission.service_index, airflow_connections())
    stopped = await trial_lifecycle.stop_trial(platform, store, submission.handle, submission.storage_id, stop.reason)
    log.info("Trial %s: %s%s", submission.handle.get("trial_id"), stop.reason, "" if stopped else " (it had ended)")
    if not stop.whole_run:
        what = f"trial {submission.handle.get('trial_id')}: {stop.reason}"
        await asyncio.to_thread(steering.record_action, store, submission.experiment_id, "Airflow", "stop trial", what)
        return stopped
    from trialflow.runs import stop_run

    await asyncio.to_thread(stop_run, store, submission.experiment_id, dag_id, run_id, "Airflow", stop.reason)
    return stopped

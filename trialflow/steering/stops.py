"""Kill a trial, stop runs or the whole experiment: intents the follow loop acts on. No Airflow.

A kill or a stop is an intent written beside the trial (``stop_request``) or the run (its
window's ``stopped``), with who asked and when; whoever follows the trial, a worker or the
triggerer on any host, reads it at its next poll (``trial_control``) and cancels the job with the
platform's own cancel. Nothing here reaches a platform: the page's api-server may not see the
machine a local trial runs on, and an intent in the store outlives any process that dies
before acting on it (the next follower, a retry, acts on it instead).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from optuna.exceptions import UpdateFinishedTrialError

from trialflow.experiment.follow import Control
from trialflow.experiment.run_windows import RunWindow, RunWindows
from trialflow.steering.base import ActionRefused, Request, UnknownTarget, check_running, find_trial, record_action

if TYPE_CHECKING:
    from trialflow.store.experiment_store import ExperimentStore, TrialRecord

#: The trial attribute a kill writes: {"by", "at", "reason"}.
STOP_REQUEST = "stop_request"
#: The trial attribute a changed maxExperimentDuration writes on running trials: {"at": deadline}.
DEADLINE_CHANGE = "experiment_deadline"


def kill_trial(store: ExperimentStore, experiment_id: str, trial_index: int, by: str) -> TrialRecord:
    """Ask trial ``trial_index`` to stop (USER_CANCELED, "killed by <by>"); its follower cancels
    the job at its next poll. A trial that already ended is refused, and so is an unknown one."""
    record = find_trial(store, experiment_id, trial_index)
    if record.finished:
        raise ActionRefused(f"trial {record.trial_id} already ended ({record.status.value}): there is nothing to kill")
    check_running(store, experiment_id)
    request = Request(by, f"killed by {by}", time.time())
    store.set_attrs(record.storage_id, **{STOP_REQUEST: request.to_dict()})
    record_action(store, experiment_id, by, "kill trial", f"trial {record.trial_index} ({record.trial_id})")
    return record


def stop_task_trial(
    store: ExperimentStore,
    dag_id: str,
    run_id: str,
    map_index: int,
    reason: str,
    by: str = "Airflow",
    group: str | None = None,
) -> tuple[str, TrialRecord] | None:
    """Ask the trial behind trial task ``map_index`` of run ``run_id`` of DAG ``dag_id`` to stop
    (the stop request its follower acts on), when it still runs: (its experiment, the trial), or
    None when there is none or it ended. What Airflow's own buttons do, recorded where the click happens (the
    api-server): measured, a task marked failed just as it deferred was set back to deferred by
    Airflow's deferral, its trigger never saw an on_kill and the trial ran to its end."""
    from trialflow.experiment import GROUP_ATTR

    for experiment_id in store.experiments_with_attr("dag_id", dag_id):
        if store.experiment_attr(experiment_id, GROUP_ATTR) != group:
            continue  # another task group's experiment (``group``: the trial task's group)
        windows = RunWindows(store, experiment_id)
        if not windows.has(run_id):
            continue
        trial_index = windows.get(run_id).trial_index(int(map_index))
        if trial_index is None:
            return None
        record = store.find_trial(experiment_id, trial_index)
        if record is None or record.finished or store.trial_attr(record.storage_id, STOP_REQUEST) is not None:
            return None
        try:
            store.set_attrs(record.storage_id, **{STOP_REQUEST: Request(by, reason, time.time()).to_dict()})
        except UpdateFinishedTrialError:
            return None  # it ended meanwhile
        return experiment_id, record
    return None


def stop_run_trials(
    store: ExperimentStore, dag_id: str, run_id: str, reason: str, by: str = "Airflow"
) -> list[TrialRecord]:
    """Ask every trial of run ``run_id`` of DAG ``dag_id`` that still runs to stop (all of its
    task groups' experiments): what clearing the whole DAG run does to its trial tasks. The runs
    are not marked stopped: their tasks run again, and each new try reports its stopped trial."""
    asked = []
    request = Request(by, reason, time.time()).to_dict()
    for experiment_id in store.experiments_with_attr("dag_id", dag_id):
        windows = RunWindows(store, experiment_id)
        if not windows.has(run_id):
            continue
        window = windows.get(run_id)
        for trial in store.active_trials(experiment_id):
            if not window.holds(trial.trial_index) or store.trial_attr(trial.storage_id, STOP_REQUEST) is not None:
                continue
            try:
                store.set_attrs(trial.storage_id, **{STOP_REQUEST: request})
            except UpdateFinishedTrialError:
                continue  # it ended meanwhile
            asked.append(trial)
    return asked


def stop_requested(store: ExperimentStore, storage_id: int) -> str | None:
    """Why someone asked the trial to stop, or None (the follow loop asks every poll)."""
    request = store.trial_attr(storage_id, STOP_REQUEST)
    return str(request.get("reason") or "stopped") if isinstance(request, dict) else None


def run_windows(store: ExperimentStore, experiment_id: str) -> dict[str, RunWindow]:
    """Every DAG run's window in the experiment, by run id."""
    return RunWindows(store, experiment_id).all()


@dataclass(frozen=True)
class Stopped:
    """What a stop did: the runs it marked (not those already stopped) and the trials it asked."""

    marked: list[str]
    asked: list[TrialRecord]


def stop_runs(
    store: ExperimentStore,
    experiment_id: str,
    by: str,
    reason: str,
    run_ids: list[str] | None = None,
    action: str | None = None,
) -> Stopped:
    """Stop the experiment's runs (``run_ids``, or all of them): no trial of theirs starts any
    more, and each running one is asked to stop.

    The runs are marked before their trials are listed, and a trial re-reads its run after it
    is submitted (trial_lifecycle.start_trial), so one starting meanwhile is either listed here or
    sees the mark: none slips through.

    ``action``: the mark is the history's line for it (shown by ``history``), written with the
    mark itself: whoever marks a run may die right after (a worker's on_kill is SIGKILLed a few
    seconds after its SIGTERM), and a separate line would then be lost."""
    if not store.experiment_exists(experiment_id):
        raise UnknownTarget(f"there is no experiment {experiment_id!r}")
    request = Request(by, reason, time.time())
    windows = run_windows(store, experiment_id)
    chosen = {run_id: w for run_id, w in windows.items() if run_ids is None or run_id in run_ids}
    if run_ids is not None and not chosen:
        raise UnknownTarget(f"experiment {experiment_id!r} has no run {', '.join(run_ids)}")
    marked = [run_id for run_id, window in chosen.items() if not window.stopped]
    RunWindows(store, experiment_id).mark_stopped(
        marked, {**request.to_dict(), **({"action": action} if action else {})}
    )
    asked = []
    for trial in store.active_trials(experiment_id):
        if (
            any(w.holds(trial.trial_index) for w in chosen.values())
            and store.trial_attr(trial.storage_id, STOP_REQUEST) is None
        ):
            store.set_attrs(trial.storage_id, **{STOP_REQUEST: request.to_dict()})
            asked.append(trial)
    return Stopped(marked, asked)


def stop_experiment(store: ExperimentStore, experiment_id: str, by: str) -> Stopped:
    """Stop every run of the experiment (see stop_runs) and say so in its history."""
    if store.experiment_exists(experiment_id):
        check_running(store, experiment_id)
    stopped = stop_runs(store, experiment_id, by, f"experiment stopped by {by}")
    record_action(store, experiment_id, by, "stop experiment", f"{len(stopped.asked)} running trial(s) asked to stop")
    return stopped


def trial_control(store: ExperimentStore, storage_id: int) -> Control:
    found = store.trial_attrs(storage_id, (STOP_REQUEST, DEADLINE_CHANGE))
    request, deadline = found.get(STOP_REQUEST), found.get(DEADLINE_CHANGE)
    return Control(
        stop=str(request.get("reason") or "stopped") if isinstance(request, dict) else None,
        deadline_changed=isinstance(deadline, dict),
        deadline=deadline.get("at") if isinstance(deadline, dict) else None,
    )

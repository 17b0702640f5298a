"""What a person asks of a running experiment, recorded in the store, acted on by whoever
follows its trials. No Airflow: the pages' API and the CLI are shells over these.

* :mod:`.base`: refusals, who asked, the experiment's history;
* :mod:`.stops`: kill a trial, stop runs or the experiment, and what the follow loop reads;
* :mod:`.limit_changes`: trialConcurrency, maxTrialNumber, maxExperimentDuration while it runs;
* :mod:`.asked_trials`: trials with chosen parameters and re-runs.
"""

from __future__ import annotations

from trialflow.steering.asked_trials import (
    POINT_TUNERS,
    add_trial,
    check_parameters,
    drop_waiting,
    rerun_trials,
    waiting_trials,
)
from trialflow.steering.base import (
    HISTORY,
    HISTORY_LIMIT,
    ActionRefused,
    BadInput,
    NotRunning,
    Request,
    UnknownTarget,
    check_running,
    history,
    record_action,
)
from trialflow.steering.limit_changes import (
    LIMIT_KEYS,
    LIMITS,
    MAX_TRIAL_NUMBER,
    change_limits,
    changed_limits,
    check_limits,
    limits,
)
from trialflow.steering.space_changes import change_search_space, check_space, space_versions
from trialflow.steering.stops import (
    DEADLINE_CHANGE,
    STOP_REQUEST,
    Stopped,
    kill_trial,
    run_windows,
    stop_experiment,
    stop_requested,
    stop_run_trials,
    stop_runs,
    stop_task_trial,
    trial_control,
)

__all__ = [
    "change_search_space",
    "check_space",
    "space_versions",
    "DEADLINE_CHANGE",
    "HISTORY",
    "HISTORY_LIMIT",
    "LIMITS",
    "LIMIT_KEYS",
    "MAX_TRIAL_NUMBER",
    "POINT_TUNERS",
    "STOP_REQUEST",
    "ActionRefused",
    "BadInput",
    "NotRunning",
    "Request",
    "Stopped",
    "UnknownTarget",
    "add_trial",
    "change_limits",
    "changed_limits",
    "check_limits",
    "check_parameters",
    "check_running",
    "trial_control",
    "drop_waiting",
    "history",
    "kill_trial",
    "limits",
    "record_action",
    "rerun_trials",
    "run_windows",
    "stop_experiment",
    "stop_requested",
    "stop_runs",
    "stop_run_trials",
    "stop_task_trial",
    "waiting_trials",
]

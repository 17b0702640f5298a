"""Change trialConcurrency, maxTrialNumber and maxExperimentDuration of a running experiment. No Airflow."""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any

from trialflow.config.units import whole_number
from trialflow.experiment import GROUP_ATTR, LIMITS_ATTR
from trialflow.experiment.run_windows import RunWindows
from trialflow.steering.base import BadInput, UnknownTarget, check_running, record_action
from trialflow.steering.stops import DEADLINE_CHANGE
from trialflow.store.concurrency_changes import limits_key, write_concurrency

if TYPE_CHECKING:
    from trialflow.store.experiment_store import ExperimentStore

#: The experiment attribute holding the limits a person changed (NNI's names, effective values).
LIMITS = LIMITS_ATTR
LIMIT_KEYS = ("trialConcurrency", "maxTrialNumber", "maxExperimentDuration")
#: Largest maxTrialNumber one may set (the store keeps trial indexes as 32-bit integers).
MAX_TRIAL_NUMBER = 2**31 - 1


def _whole(key: str, value: Any, top: int) -> int:
    """A whole number 1..top from a JSON number or a string of ASCII digits; anything else
    ("²", a 5,000-digit string, 10**400, 2.5, true) is BadInput naming the key, never a crash."""
    expected = f"{key}: expected a whole number 1..{top}"
    if isinstance(value, str):
        number = whole_number(value.strip()) if len(value) <= 32 else None
        if number is None:
            shown = repr(value) if len(value) <= 32 else f"a string of {len(value)} characters"
            raise BadInput(f"{expected}, got {shown}")
    elif isinstance(value, int) and not isinstance(value, bool):
        number = value
    else:
        raise BadInput(f"{expected}, got {type(value).__name__ if isinstance(value, (dict, list)) else repr(value)}")
    if not 1 <= number <= top:
        shown = str(number) if number.bit_length() <= 64 else f"a {number.bit_length()}-bit number"
        raise BadInput(f"{expected}, got {shown}")
    return number


def check_limits(changes: dict[str, Any]) -> dict[str, Any]:
    """The changes as numbers (maxExperimentDuration in seconds), or ActionRefused naming the
    key and what was expected, as ``trialflow validate`` words it."""
    from trialflow.config.units import parse_duration
    from trialflow.limits import MAX_EXPERIMENT_SECONDS, MAX_TRIALS_PER_RUN

    if not isinstance(changes, dict) or not changes:
        raise BadInput(f"nothing to change: give one or more of {', '.join(LIMIT_KEYS)}")
    unknown = sorted(set(changes) - set(LIMIT_KEYS))
    if unknown:
        raise BadInput(f"{unknown[0]}: not a limit one can change; expected one of {', '.join(LIMIT_KEYS)}")
    checked: dict[str, Any] = {}
    if "trialConcurrency" in changes:
        checked["trialConcurrency"] = _whole("trialConcurrency", changes["trialConcurrency"], MAX_TRIALS_PER_RUN)
    if "maxTrialNumber" in changes:
        checked["maxTrialNumber"] = _whole("maxTrialNumber", changes["maxTrialNumber"], MAX_TRIAL_NUMBER)
    if "maxExperimentDuration" in changes:
        try:
            seconds = parse_duration(changes["maxExperimentDuration"])
        except ValueError as exc:
            raise BadInput(f"maxExperimentDuration: {exc}") from None
        if seconds > MAX_EXPERIMENT_SECONDS:
            raise BadInput(
                f"maxExperimentDuration: expected at most {MAX_EXPERIMENT_SECONDS // 86400} days "
                f"({MAX_EXPERIMENT_SECONDS} s), got {seconds:g} s"
            )
        checked["maxExperimentDuration"] = seconds
    return checked


def limits(store: ExperimentStore, experiment_id: str) -> dict[str, Any]:
    """The experiment's limits now: the config's, with what a person changed over them
    (maxExperimentDuration in seconds when changed; as the config wrote it otherwise)."""
    if not store.experiment_exists(experiment_id):
        raise UnknownTarget(f"there is no experiment {experiment_id!r}")
    config = store.experiment_attr(experiment_id, "config") or {}
    changed = store.experiment_attr(experiment_id, LIMITS) or {}
    return {key: changed.get(key, config.get(key)) for key in LIMIT_KEYS}


def changed_limits(store: ExperimentStore, experiment_id: str) -> dict[str, Any]:
    return dict(store.experiment_attr(experiment_id, LIMITS) or {})


def change_limits(store: ExperimentStore, experiment_id: str, by: str, changes: dict[str, Any]) -> dict[str, Any]:
    """Change trialConcurrency, maxTrialNumber or maxExperimentDuration of a running experiment.

    maxTrialNumber is read by each trial as it starts (one past it ends skipped, saying why)
    and by the end step (a raised one goes on in a follow-on run). maxExperimentDuration moves
    every run's deadline (from when the run started) and reaches running trials through their
    follow loop. trialConcurrency is written for the experiment's DAG (store.concurrency_changes),
    which the next parse of its file reads (the pages' action asks Airflow for that parse).
    Returns the limits."""
    checked = check_limits(changes)
    if not store.experiment_exists(experiment_id):
        raise UnknownTarget(f"there is no experiment {experiment_id!r}")
    check_running(store, experiment_id)
    if "maxExperimentDuration" in checked:
        _move_deadlines(store, experiment_id, checked["maxExperimentDuration"])
    # Atomic: two changes at once (or a change beside an added trial's maxTrialNumber) both stay.
    store.update_experiment_attr(experiment_id, LIMITS, lambda old: {**(old or {}), **checked})
    dag_id = store.experiment_attr(experiment_id, "dag_id")
    if "trialConcurrency" in checked and dag_id:
        group = store.experiment_attr(experiment_id, GROUP_ATTR)
        write_concurrency(store.engine, limits_key(dag_id, group), experiment_id, checked["trialConcurrency"])

    def said(key: str, value: Any) -> str:
        if key == "maxExperimentDuration" and isinstance(value, float) and math.isfinite(value):
            return f"{key} {value:g} s"
        return f"{key} {value}"

    record_action(store, experiment_id, by, "change limits", ", ".join(said(k, v) for k, v in checked.items()))
    return limits(store, experiment_id)


def _move_deadlines(store: ExperimentStore, experiment_id: str, seconds: float) -> None:
    """Every run's deadline becomes the time its duration counts from + ``seconds`` (a run that
    continues another counts from that one's start), and running trials are told. Never the old
    deadline minus the old duration plus the new one: after a duration of 1e308 s that difference
    of huge floats was 0, and the next change set a deadline in 1970 that cancelled every trial."""
    moved = RunWindows(store, experiment_id).move_deadlines(seconds, time.time())
    for trial in store.active_trials(experiment_id):
        for window in moved.values():
            if window.holds(trial.trial_index):
                store.set_attrs(trial.storage_id, **{DEADLINE_CHANGE: {"at": window.deadline}})

"""What a person asks of a running experiment, recorded in the store. No Airflow.

A kill or a stop is an intent written beside the trial (``stop_request``) or the run
(its window's ``stopped``), with who asked and when; whoever follows the trial, a worker
or the triggerer on any host, reads it at its next poll and cancels the job with the
platform's own cancel. Nothing here reaches a platform: the page's api-server may not
see the machine a local trial runs on, and an intent in the store outlives any process
that dies before acting on it (the next follower, a retry, acts on it instead).

Every action is appended to the experiment's history (``actions``), which the pages
show; the Airflow layer also writes Airflow's audit log.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trialflow.experiment import LIMITS_ATTR, RUN_ATTR_PREFIX, RunWindow
from trialflow.follow import Control
from trialflow.platforms.base import TrialStatus

if TYPE_CHECKING:
    from trialflow.tuning.experiment_store import ExperimentStore, TrialRecord

#: The trial attribute a kill writes: {"by", "at", "reason"}.
STOP_REQUEST = "stop_request"
#: The experiment attribute listing every action taken on it, oldest first.
HISTORY = "actions"
#: Entries kept in the history (the oldest go first): a bound on the attribute's size.
HISTORY_LIMIT = 500


class ActionRefused(ValueError):
    """The action cannot be taken as asked (a trial already ended); nothing changed."""


class UnknownTarget(ActionRefused):
    """The action names an experiment, trial or run that does not exist; nothing changed."""


class BadInput(ActionRefused):
    """A value the action was given is not one it takes (a limit, a parameter); nothing changed."""


@dataclass(frozen=True)
class Request:
    """Who asked for something, when and why."""

    by: str
    reason: str
    at: float

    def to_dict(self) -> dict[str, Any]:
        return {"by": self.by, "reason": self.reason, "at": self.at}


def record_action(store: ExperimentStore, experiment_id: str, by: str, action: str, detail: str) -> dict[str, Any]:
    """Append one action to the experiment's history (the newest HISTORY_LIMIT are kept)."""
    entry = {"at": time.time(), "by": by, "action": action, "detail": detail}
    history = list(store.experiment_attr(experiment_id, HISTORY) or [])
    history.append(entry)
    store.set_experiment_attrs(experiment_id, {HISTORY: history[-HISTORY_LIMIT:]})
    return entry


def history(store: ExperimentStore, experiment_id: str) -> list[dict[str, Any]]:
    return list(store.experiment_attr(experiment_id, HISTORY) or [])


def _trial(store: ExperimentStore, experiment_id: str, trial_index: int) -> TrialRecord:
    if not store.experiment_exists(experiment_id):
        raise UnknownTarget(f"there is no experiment {experiment_id!r}")
    record = store.find_trial(experiment_id, trial_index)
    if record is None:
        raise UnknownTarget(f"experiment {experiment_id!r} has no trial {trial_index} (it has not started)")
    return record


def kill_trial(store: ExperimentStore, experiment_id: str, trial_index: int, by: str) -> TrialRecord:
    """Ask trial ``trial_index`` to stop (USER_CANCELED, "killed by <by>"); its follower cancels
    the job at its next poll. A trial that already ended is refused, and so is an unknown one."""
    record = _trial(store, experiment_id, trial_index)
    if record.finished:
        raise ActionRefused(f"trial {record.trial_id} already ended ({record.status.value}): there is nothing to kill")
    request = Request(by, f"killed by {by}", time.time())
    store.set_attrs(record.storage_id, **{STOP_REQUEST: request.to_dict()})
    record_action(store, experiment_id, by, "kill trial", f"trial {record.trial_index} ({record.trial_id})")
    return record


def stop_requested(store: ExperimentStore, storage_id: int) -> str | None:
    """Why someone asked the trial to stop, or None (the follow loop asks every poll)."""
    request = store.trial_attr(storage_id, STOP_REQUEST)
    return str(request.get("reason") or "stopped") if isinstance(request, dict) else None


def run_windows(store: ExperimentStore, experiment_id: str) -> dict[str, RunWindow]:
    """Every DAG run's window in the experiment, by run id."""
    attrs = store.experiment_attrs(experiment_id)
    return {
        key[len(RUN_ATTR_PREFIX) :]: RunWindow.parse(value)
        for key, value in attrs.items()
        if key.startswith(RUN_ATTR_PREFIX) and isinstance(value, dict)
    }


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
) -> Stopped:
    """Stop the experiment's runs (``run_ids``, or all of them): no trial of theirs starts any
    more, and each running one is asked to stop.

    The runs are marked before their trials are listed, and a trial re-reads its run after it
    is submitted (lifecycle.start_trial), so one starting meanwhile is either listed here or
    sees the mark: none slips through."""
    if not store.experiment_exists(experiment_id):
        raise UnknownTarget(f"there is no experiment {experiment_id!r}")
    request = Request(by, reason, time.time())
    attrs = store.experiment_attrs(experiment_id)
    windows = run_windows(store, experiment_id)
    chosen = {run_id: w for run_id, w in windows.items() if run_ids is None or run_id in run_ids}
    if run_ids is not None and not chosen:
        raise UnknownTarget(f"experiment {experiment_id!r} has no run {', '.join(run_ids)}")
    marked = [run_id for run_id, window in chosen.items() if not window.stopped]
    store.set_experiment_attrs(
        experiment_id,
        {
            RUN_ATTR_PREFIX + run_id: {**attrs[RUN_ATTR_PREFIX + run_id], "stopped": request.to_dict()}
            for run_id in marked
        },
    )
    ranges = [range(w.first_index, w.first_index + w.count) for w in chosen.values()]
    asked = []
    for trial in store.active_trials(experiment_id):
        if any(trial.trial_index in r for r in ranges) and store.trial_attr(trial.storage_id, STOP_REQUEST) is None:
            store.set_attrs(trial.storage_id, **{STOP_REQUEST: request.to_dict()})
            asked.append(trial)
    return Stopped(marked, asked)


def stop_experiment(store: ExperimentStore, experiment_id: str, by: str) -> Stopped:
    """Stop every run of the experiment (see stop_runs) and say so in its history."""
    stopped = stop_runs(store, experiment_id, by, f"experiment stopped by {by}")
    record_action(store, experiment_id, by, "stop experiment", f"{len(stopped.asked)} running trial(s) asked to stop")
    return stopped


# -- limits -------------------------------------------------------------------------------

#: The experiment attribute holding the limits a person changed (NNI's names, effective values).
LIMITS = LIMITS_ATTR
#: The trial attribute a changed maxExperimentDuration writes on running trials: {"at": deadline}.
DEADLINE_CHANGE = "experiment_deadline"
LIMIT_KEYS = ("trialConcurrency", "maxTrialNumber", "maxExperimentDuration")
#: Largest maxTrialNumber one may set (the store keeps trial indexes as 32-bit integers).
MAX_TRIAL_NUMBER = 2**31 - 1


def _whole(key: str, value: Any, top: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) and not (isinstance(value, str) and value.isdigit()):
        raise BadInput(f"{key}: expected a whole number 1..{top}, got {value!r}")
    number = int(value)
    if not 1 <= number <= top:
        raise BadInput(f"{key}: expected a whole number 1..{top}, got {number}")
    return number


def check_limits(changes: dict[str, Any]) -> dict[str, Any]:
    """The changes as numbers (maxExperimentDuration in seconds), or ActionRefused naming the
    key and what was expected, as ``trialflow validate`` words it."""
    from trialflow.config.units import parse_duration
    from trialflow.limits import MAX_TRIALS_PER_RUN

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
            checked["maxExperimentDuration"] = parse_duration(changes["maxExperimentDuration"])
        except ValueError as exc:
            raise BadInput(f"maxExperimentDuration: {exc}") from None
    return checked


def limits(store: ExperimentStore, experiment_id: str) -> dict[str, Any]:
    """The experiment's limits now: the config's, with what a person changed over them
    (maxExperimentDuration in seconds when changed; as the config wrote it otherwise)."""
    config = (store.experiment_attr(experiment_id, "config") or {}) if store.experiment_exists(experiment_id) else {}
    changed = store.experiment_attr(experiment_id, LIMITS) or {}
    return {key: changed.get(key, config.get(key)) for key in LIMIT_KEYS}


def changed_limits(store: ExperimentStore, experiment_id: str) -> dict[str, Any]:
    return dict(store.experiment_attr(experiment_id, LIMITS) or {})


def change_limits(store: ExperimentStore, experiment_id: str, by: str, changes: dict[str, Any]) -> dict[str, Any]:
    """Change trialConcurrency, maxTrialNumber or maxExperimentDuration of a running experiment.

    maxTrialNumber is read by each trial as it starts (one past it ends skipped, saying why)
    and by the end step (a raised one goes on in a follow-on run). maxExperimentDuration moves
    every run's deadline (from when the run started) and reaches running trials through their
    follow loop. trialConcurrency is the caller's to bring to Airflow (dag_limits + a parse
    of the DAG file): it is recorded here for the pages and the history. Returns the limits."""
    import math

    checked = check_limits(changes)
    if not store.experiment_exists(experiment_id):
        raise UnknownTarget(f"there is no experiment {experiment_id!r}")
    before = limits(store, experiment_id)
    if "maxExperimentDuration" in checked:
        _move_deadlines(store, experiment_id, before.get("maxExperimentDuration"), checked["maxExperimentDuration"])
    store.set_experiment_attrs(experiment_id, {LIMITS: {**changed_limits(store, experiment_id), **checked}})

    def said(key: str, value: Any) -> str:
        if key == "maxExperimentDuration" and isinstance(value, float) and math.isfinite(value):
            return f"{key} {value:g} s"
        return f"{key} {value}"

    record_action(store, experiment_id, by, "change limits", ", ".join(said(k, v) for k, v in checked.items()))
    return limits(store, experiment_id)


def _move_deadlines(store: ExperimentStore, experiment_id: str, before: Any, seconds: float) -> None:
    """Every run's deadline becomes its start + ``seconds`` (a run that inherited its deadline
    from the run it continues moves by as much as that one), and running trials are told."""
    from trialflow.config.units import parse_duration

    old = parse_duration(before) if before else None
    attrs = store.experiment_attrs(experiment_id)
    moved: dict[str, Any] = {}
    for key, raw in attrs.items():
        if not key.startswith(RUN_ATTR_PREFIX) or not isinstance(raw, dict):
            continue
        if raw.get("deadline") is not None and old is not None:
            deadline = float(raw["deadline"]) - old + seconds
        else:
            deadline = float(raw.get("started_at") or time.time()) + seconds
        moved[key] = {**raw, "deadline": deadline}
    store.set_experiment_attrs(experiment_id, moved)
    for trial in store.active_trials(experiment_id):
        for raw in moved.values():
            window = RunWindow.parse(raw)
            if window.first_index <= trial.trial_index < window.first_index + window.count:
                store.set_attrs(trial.storage_id, **{DEADLINE_CHANGE: {"at": window.deadline}})


def control(store: ExperimentStore, storage_id: int) -> Control:
    found = store.trial_attrs(storage_id, (STOP_REQUEST, DEADLINE_CHANGE))
    request, deadline = found.get(STOP_REQUEST), found.get(DEADLINE_CHANGE)
    return Control(
        stop=str(request.get("reason") or "stopped") if isinstance(request, dict) else None,
        deadline_changed=isinstance(deadline, dict),
        deadline=deadline.get("at") if isinstance(deadline, dict) else None,
    )


# -- trials a person asks for ---------------------------------------------------------------

#: Tuners that run their points in index order: a trial of one's own would take a point's place.
POINT_TUNERS = frozenset({"gridsearch", "batchtuner"})


def _space_of(store: ExperimentStore, experiment_id: str) -> tuple[Any, str]:
    from trialflow.config.search_space import parse_search_space

    if not store.experiment_exists(experiment_id):
        raise UnknownTarget(f"there is no experiment {experiment_id!r}")
    config = store.experiment_attr(experiment_id, "config") or {}
    if not config.get("searchSpace"):
        raise ActionRefused(
            f"experiment {experiment_id!r} keeps no search space in the store: nothing to check against"
        )
    algorithm = config.get("tuner") or config.get("advisor") or {}
    name = str(algorithm.get("name", "")) if isinstance(algorithm, dict) else ""
    return parse_search_space(config["searchSpace"]), name


def check_parameters(store: ExperimentStore, experiment_id: str, parameters: Any) -> dict[str, Any]:
    """``parameters`` if they are a point of the experiment's search space, else ActionRefused
    naming the parameter and what was expected (the words of ``trialflow validate``)."""
    from trialflow.config.search_space import SearchSpaceError, encode

    space, tuner = _space_of(store, experiment_id)
    if tuner.replace("_", "").lower() in POINT_TUNERS:
        raise ActionRefused(
            f"{tuner} runs its points in order: a trial with chosen parameters would take a point's place"
        )
    try:
        encode(space, parameters)
    except SearchSpaceError as exc:
        raise BadInput(f"parameters.{exc}") from None
    return dict(parameters)


def _one_more_trial(store: ExperimentStore, experiment_id: str, count: int) -> None:
    """An asked-for trial does not use up the tuner's: maxTrialNumber grows by as many (an
    experiment without one has no budget to grow)."""
    current = limits(store, experiment_id).get("maxTrialNumber")
    if current is not None:
        changed = changed_limits(store, experiment_id)
        store.set_experiment_attrs(experiment_id, {LIMITS: {**changed, "maxTrialNumber": int(current) + count}})


def add_trial(store: ExperimentStore, experiment_id: str, parameters: Any, by: str, reason: str | None = None) -> int:
    """Queue a trial with these parameters: the next trial index to start runs it (before the
    tuner's own), the tuner learns from its result, and maxTrialNumber grows by one. Returns
    its place in the queue."""
    from trialflow.tuning.tuners import BUDGET_KEY

    chosen = check_parameters(store, experiment_id, parameters)
    why = reason or f"added by {by}"
    seq = store.enqueue(experiment_id, chosen, {"by": by, "reason": why, "at": time.time()})
    _one_more_trial(store, experiment_id, 1)
    shown = {k: v for k, v in chosen.items() if k != BUDGET_KEY}
    record_action(store, experiment_id, by, "add trial", f"{why}: {json.dumps(shown, default=str)[:300]}")
    return seq


def rerun_trials(
    store: ExperimentStore, experiment_id: str, by: str, trial_indexes: list[int] | None = None
) -> list[int]:
    """Queue each trial again with its parameters (``trial_indexes``, or every FAILED one): a
    new trial each, the old ones stay in the history. Returns the indexes re-run."""
    from trialflow.tuning.tuners import BUDGET_KEY

    _space_of(store, experiment_id)  # an unknown experiment is refused first
    if trial_indexes is None:
        chosen = [r for r in store.trial_rows(experiment_id) if r["status"] == TrialStatus.FAILED.value]
        if not chosen:
            raise ActionRefused(f"experiment {experiment_id!r} has no failed trial to re-run")
    else:
        chosen = []
        for index in trial_indexes:
            record = _trial(store, experiment_id, index)
            if not record.finished:
                raise ActionRefused(
                    f"trial {record.trial_id} is still {record.status.value}: it can be re-run once it ends"
                )
            chosen.append({"trial_index": index, "parameters": record.parameters})
    for row in chosen:  # every one checked before any is queued: all or nothing
        check_parameters(store, experiment_id, {k: v for k, v in row["parameters"].items() if k != BUDGET_KEY})
    for row in chosen:
        parameters = {k: v for k, v in row["parameters"].items() if k != BUDGET_KEY}
        add_trial(store, experiment_id, parameters, by, f"re-run of trial {row['trial_index']} by {by}")
    return [int(r["trial_index"]) for r in chosen]


def waiting_trials(store: ExperimentStore, experiment_id: str) -> list[dict[str, Any]]:
    """Asked-for trials no trial index has taken yet (for the pages)."""
    return [{"parameters": q.parameters, **q.request} for q in store.waiting_trials(experiment_id)]

"""Trials a person asks for: chosen parameters and re-runs, queued for the next trial index. No Airflow."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from trialflow.platforms.base import TrialStatus
from trialflow.steering.base import ActionRefused, BadInput, UnknownTarget, check_running, find_trial, record_action
from trialflow.steering.limit_changes import LIMITS

if TYPE_CHECKING:
    from trialflow.store.experiment_store import ExperimentStore

#: What "re-run failed" takes when no trial is named: failed, killed, early-stopped and cancelled
#: trials (a killed trial's parameters deserve a second chance as much as a failed one's).
RERUNNABLE = frozenset(
    {TrialStatus.FAILED, TrialStatus.USER_CANCELED, TrialStatus.EARLY_STOPPED, TrialStatus.SYS_CANCELED}
)
#: Problems an add-trial answer lists at most (the rest are counted).
SHOWN_PROBLEMS = 20
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
    from trialflow.config.search_space import point_problems

    space, tuner = _space_of(store, experiment_id)
    if tuner.replace("_", "").lower() in POINT_TUNERS:
        raise ActionRefused(
            f"{tuner} runs its points in order: a trial with chosen parameters would take a point's place"
        )
    problems = point_problems(space, parameters)
    if problems:  # every one at once, each naming its parameter (the first SHOWN_PROBLEMS)
        said = "; ".join(f"parameters.{problem}" for problem in problems[:SHOWN_PROBLEMS])
        more = len(problems) - SHOWN_PROBLEMS
        raise BadInput(said + (f"; and {more} more" if more > 0 else ""))
    return dict(parameters)


def _one_more_trial(store: ExperimentStore, experiment_id: str, count: int) -> None:
    """An asked-for trial does not use up the tuner's: maxTrialNumber grows by as many (an
    experiment without one has no budget to grow)."""
    configured = (store.experiment_attr(experiment_id, "config") or {}).get("maxTrialNumber")

    def grown(old: Any) -> Any:  # atomic: twenty trials added at once raise it by twenty
        current = (old or {}).get("maxTrialNumber", configured)
        return old if current is None else {**(old or {}), "maxTrialNumber": int(current) + count}

    store.update_experiment_attr(experiment_id, LIMITS, grown)


def add_trial(
    store: ExperimentStore,
    experiment_id: str,
    parameters: Any,
    by: str,
    reason: str | None = None,
    rerun_of: int | None = None,
) -> int:
    """Queue a trial with these parameters: the next trial index to start runs it (before the
    tuner's own), the tuner learns from its result, and maxTrialNumber grows by one. Returns
    its place in the queue."""
    from trialflow.limits import MAX_WAITING_TRIALS
    from trialflow.store.trial_queue import QueueFull
    from trialflow.tuning.tuners import BUDGET_KEY

    chosen = check_parameters(store, experiment_id, parameters)
    check_running(store, experiment_id)
    why = reason or f"added by {by}"
    try:
        request: dict[str, Any] = {"by": by, "reason": why, "at": time.time()}
        if rerun_of is not None:  # what the trial's MLflow run says it is (trialflow.tracking)
            request["rerun_of"] = rerun_of
        seq = store.enqueue(experiment_id, chosen, request, MAX_WAITING_TRIALS)
    except QueueFull:
        raise BadInput(_full(experiment_id)) from None
    _one_more_trial(store, experiment_id, 1)
    shown = {k: v for k, v in chosen.items() if k != BUDGET_KEY}
    record_action(store, experiment_id, by, "add trial", f"{why}: {json.dumps(shown, default=str)[:300]}")
    return seq


def rerun_trials(
    store: ExperimentStore, experiment_id: str, by: str, trial_indexes: list[int] | None = None
) -> list[int]:
    """Queue each trial again with its parameters (``trial_indexes``, or every failed, killed,
    early-stopped or cancelled one: RERUNNABLE): a new trial each, the old ones stay in the
    history. Returns the indexes re-run."""
    from trialflow.tuning.tuners import BUDGET_KEY

    _space_of(store, experiment_id)  # an unknown experiment is refused first
    check_running(store, experiment_id)
    if trial_indexes is None:
        rerunnable = {s.value for s in RERUNNABLE}
        chosen = [
            (r.trial_index, r.parameters or {})
            for r in store.trial_rows(experiment_id)
            if r.status in rerunnable and r.trial_index is not None
        ]
        if not chosen:
            raise ActionRefused(f"experiment {experiment_id!r} has no failed, killed or stopped trial to re-run")
    else:
        chosen = []
        for index in trial_indexes:
            record = find_trial(store, experiment_id, index)
            if not record.finished:
                raise ActionRefused(
                    f"trial {record.trial_id} is still {record.status.value}: it can be re-run once it ends"
                )
            chosen.append((index, record.parameters))
    from trialflow.limits import MAX_WAITING_TRIALS

    if store.waiting_count(experiment_id) + len(chosen) > MAX_WAITING_TRIALS:
        raise BadInput(_full(experiment_id, len(chosen)))
    points = [(index, {k: v for k, v in parameters.items() if k != BUDGET_KEY}) for index, parameters in chosen]
    for _, point in points:  # every one checked before any is queued: all or nothing
        check_parameters(store, experiment_id, point)
    for index, point in points:
        add_trial(store, experiment_id, point, by, f"re-run of trial {index} by {by}", rerun_of=index)
    return [index for index, _ in points]


def _full(experiment_id: str, asked: int = 1) -> str:
    from trialflow.limits import MAX_WAITING_TRIALS

    return (
        f"experiment {experiment_id} may have at most {MAX_WAITING_TRIALS} asked-for trials waiting; "
        f"{'this one does' if asked == 1 else f'these {asked} would'} not fit: "
        "add more once some have started"
    )


def drop_waiting(store: ExperimentStore, experiment_id: str) -> int:
    """The experiment ended (no follow-on run): the asked-for trials still waiting will never
    run. Dropped, and said in its history (so a person sees where their trials went), instead of
    "waiting" forever on a page of an experiment that is over."""
    dropped = store.drop_waiting(experiment_id)
    if dropped:
        record_action(
            store,
            experiment_id,
            "trialflow",
            "drop waiting trials",
            f"{dropped} asked-for trial(s) had not started when the experiment ended",
        )
    return dropped


def waiting_trials(store: ExperimentStore, experiment_id: str) -> list[dict[str, Any]]:
    """Asked-for trials no trial index has taken yet (for the pages)."""
    return [{"parameters": q.parameters, **q.request} for q in store.waiting_trials(experiment_id)]

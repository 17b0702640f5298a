"""The experiment pages' actions: kill a trial, stop the experiment, change its limits or its
search space, add and re-run trials. POST or PATCH only, from this Airflow's own origin, bodies bounded; each
checks the user may edit the experiment's DAG, hands the decision to trialflow.steering, and
writes Airflow's audit log. Nothing here decides whether an action is allowed on an experiment."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, BackgroundTasks, Body

from trialflow.ui.access import (
    BoundedBody,
    SameOrigin,
    TrialIndex,
    User,
    action_store,
    audit,
    authorize_edit,
    live_run,
    refused,
    request_parse,
    user_name,
)

router = APIRouter(dependencies=[SameOrigin, BoundedBody])


@router.post("/api/experiments/{experiment_id}/trials/{trial_index}/kill")
def kill(user: User, experiment_id: str, trial_index: TrialIndex) -> dict[str, Any]:
    """Stop one running trial (nnictl's ``trial kill``): its process tree ends in SIGKILL after its grace."""
    from trialflow import steering

    dag_id = authorize_edit(user, experiment_id)
    try:
        record = steering.kill_trial(action_store(), experiment_id, trial_index, user_name(user))
    except steering.ActionRefused as exc:
        raise refused(exc) from None
    audit(user, "kill_trial", dag_id, {"experiment_id": experiment_id, "trial_index": trial_index})
    return {"trial_id": record.trial_id, "trial_index": trial_index, "requested": "stop"}


@router.post("/api/experiments/{experiment_id}/stop")
def stop(user: User, experiment_id: str) -> dict[str, Any]:
    """Stop the experiment (nnictl's ``stop``): its runs are marked to end and running trials are stopped."""
    from trialflow import steering

    dag_id = authorize_edit(user, experiment_id)
    try:
        stopped = steering.stop_experiment(action_store(), experiment_id, user_name(user))
    except steering.ActionRefused as exc:
        raise refused(exc) from None
    audit(user, "stop_experiment", dag_id, {"experiment_id": experiment_id})
    return {"runs": stopped.marked, "trials": [t.trial_index for t in stopped.asked]}


@router.patch("/api/experiments/{experiment_id}/limits")
def change_limits(
    user: User, experiment_id: str, changes: Annotated[dict[str, Any], Body()], background: BackgroundTasks
) -> dict[str, Any]:
    """Change trialConcurrency, maxTrialNumber or maxExperimentDuration of a running experiment."""
    from trialflow import steering

    dag_id = authorize_edit(user, experiment_id)
    try:
        steering.check_limits(changes)  # a bad value is refused before anything is read
    except steering.ActionRefused as exc:
        raise refused(exc) from None
    live_run(dag_id, experiment_id)
    store = action_store()
    try:
        limits = steering.change_limits(store, experiment_id, user_name(user), changes)
    except steering.ActionRefused as exc:
        raise refused(exc) from None
    parsed = "trialConcurrency" in changes and bool(dag_id) and request_parse(experiment_id, str(dag_id), background)
    audit(user, "change_limits", dag_id, {"experiment_id": experiment_id, **changes})
    return {"limits": limits, "dag_parse_requested": parsed}


@router.put("/api/experiments/{experiment_id}/search-space")
def change_search_space(user: User, experiment_id: str, space: Annotated[Any, Body()]) -> dict[str, Any]:
    """Replace a running experiment's search space (nnictl's ``update searchspace``), kept as a new version."""
    from trialflow import steering

    dag_id = authorize_edit(user, experiment_id)
    store = action_store()
    config = store.experiment_attr(experiment_id, "config")
    try:
        steering.check_space(config if isinstance(config, dict) else {}, space)  # refused before anything else
    except steering.ActionRefused as exc:
        raise refused(exc) from None
    live_run(dag_id, experiment_id)
    try:
        version = steering.change_search_space(store, experiment_id, user_name(user), space)
    except steering.ActionRefused as exc:
        raise refused(exc) from None
    audit(user, "change_search_space", dag_id, {"experiment_id": experiment_id, "version": version.version})
    return {"version": version.version, "space": version.space, "at": version.at, "by": version.by}


@router.post("/api/experiments/{experiment_id}/trials")
def add_trial(user: User, experiment_id: str, body: Annotated[dict[str, Any], Body()]) -> dict[str, Any]:
    """Add a trial with the parameters given (``{"parameters": {...}}``), checked against the search space."""
    from trialflow import steering

    dag_id = authorize_edit(user, experiment_id)
    store = action_store()
    try:
        steering.check_parameters(store, experiment_id, body.get("parameters"))
        live_run(dag_id, experiment_id)
        steering.add_trial(store, experiment_id, body.get("parameters"), user_name(user))
    except steering.ActionRefused as exc:
        raise refused(exc) from None
    audit(user, "add_trial", dag_id, {"experiment_id": experiment_id, "parameters": body.get("parameters")})
    return {
        # A count, not the queue: an answer that grew with each trial added (150 KB at a thousand).
        "waiting": store.waiting_count(experiment_id),
        "limits": steering.limits(store, experiment_id),
    }


@router.post("/api/experiments/{experiment_id}/trials/{trial_index}/rerun")
def rerun(user: User, experiment_id: str, trial_index: TrialIndex) -> dict[str, Any]:
    """Run one ended trial's parameters again, as a new trial."""
    return _rerun(user, experiment_id, [trial_index])


@router.post("/api/experiments/{experiment_id}/rerun-failed")
def rerun_failed(user: User, experiment_id: str) -> dict[str, Any]:
    """Run the parameters of every failed trial again, each as a new trial."""
    return _rerun(user, experiment_id, None)


def _rerun(user: Any, experiment_id: str, indexes: list[int] | None) -> dict[str, Any]:
    from trialflow import steering

    dag_id = authorize_edit(user, experiment_id)
    store = action_store()
    try:
        live_run(dag_id, experiment_id)
        rerun = steering.rerun_trials(store, experiment_id, user_name(user), indexes)
    except steering.ActionRefused as exc:
        raise refused(exc) from None
    audit(user, "rerun_trials", dag_id, {"experiment_id": experiment_id, "trial_indexes": rerun})
    return {"rerun": rerun, "waiting": store.waiting_count(experiment_id)}

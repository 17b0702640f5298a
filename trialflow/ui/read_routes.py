"""The experiment pages' reads: lists, one experiment, its trials, charts, history, config,
exports, and which experiment a task instance belongs to. Each route checks the user may read
the experiment's DAG (trialflow.ui.access) and asks trialflow.queries; nothing here renders
HTML or decides anything about an experiment."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, HTTPException, Query
from fastapi.responses import JSONResponse, Response, StreamingResponse

from trialflow import queries, task_ids
from trialflow.experiment.run_windows import RunWindow
from trialflow.trial.status import TERMINAL_STATUSES
from trialflow.ui.access import (
    MAX_INT,
    Offset,
    TrialIndex,
    User,
    action_store,
    authorize,
    dag_runs,
    index_list,
    may_edit_dag,
    may_read_dag,
    run_state,
    store_engine,
)
from trialflow.ui.links import base_url, platform_url

router = APIRouter()
TERMINAL_NAMES = frozenset(s.value for s in TERMINAL_STATUSES)
LOG_TAIL_BYTES = 16 * 1024
#: Shorter secret inputs are not replaced in a log tail (every "a" or "1" would go; Airflow's
#: masker skips short secrets too).
MIN_MASKED_SECRET = 3


#: Airflow's audit events that can stop a trial task (its own REST routes' names).
STOPPING_EVENTS = (
    "patch_task_instance",
    "patch_task_instance_dry_run",
    "post_clear_task_instances",
    "patch_dag_run",
    "clear_dag_run",
    "bulk_task_instances",
)


def airflow_actions(
    dag_id: str | None, run_id: str | None, map_index: int | None, trial_task: str = task_ids.TRIAL
) -> list[dict[str, Any]]:
    """Who acted on the trial's task (``trial_task``: ``trial``, or ``<group>.trial`` in an
    experiment task group) or its DAG run with Airflow's own buttons (Airflow's audit log): the
    store says what stopped a trial ("its task was marked failed"), this says who."""
    if not dag_id or not run_id:
        return []
    from airflow.models.log import Log
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        rows = session.execute(
            select(Log.dttm, Log.owner, Log.event, Log.task_id, Log.extra)
            .where(Log.dag_id == dag_id, Log.run_id == run_id, Log.event.in_(STOPPING_EVENTS))
            .order_by(Log.dttm.desc())
            .limit(50)
        ).all()
    found = []
    for dttm, owner, event, task_id, extra in rows:
        try:
            details = json.loads(extra or "{}")
        except ValueError:
            details = {}
        if task_id not in (None, trial_task) or event == "patch_task_instance_dry_run":
            continue
        if task_id == trial_task and str(details.get("map_index", map_index)) != str(map_index):
            continue  # another trial's task
        named = details.get("task_ids") if event == "post_clear_task_instances" else None
        if isinstance(named, list) and not any(t == trial_task or t == [trial_task, map_index] for t in named):
            continue  # a clear of other tasks
        what = details.get("new_state") or details.get("state") or ("clear" if "clear" in event else None)
        found.append({"at": dttm.timestamp() if dttm else None, "by": owner, "event": event, "state": what})
    return found[:10]


def _map_index(summary: dict[str, Any], trial_index: int) -> tuple[str | None, int | None]:
    """(run_id, map index) of the task instance that ran trial ``trial_index``."""
    for raw in summary.get("runs", []):
        window = RunWindow.parse(raw)
        if window.holds(trial_index):
            return raw.get("run_id"), trial_index - window.first_index
    return summary.get("run_id"), trial_index


def _ti_url(dag_id: str, run_id: str, map_index: int, trial_task: str = task_ids.TRIAL) -> str:
    return (
        f"{base_url()}dags/{quote(dag_id, safe='')}/runs/{quote(run_id, safe='')}/tasks/"
        f"{quote(trial_task, safe='')}/mapped/{map_index}"
    )


def _log_tail(handle: dict[str, Any], secrets: list[str]) -> list[dict[str, str]]:
    """The end of the trial's output files that its platform says Airflow's machines can read
    (the handle's ``log_files``: a local trial's stdout and stderr; remote and Kubernetes
    trials' logs stay where they ran), masked as Airflow masks the task log it serves: the
    run's secret inputs (``secrets``, which the trial got and may print), what this process's
    secrets masker knows, and the secrets inside values (``TOKEN=...``, ``user:pass@``)."""
    from trialflow.platforms.base import handle_log_files
    from trialflow.trial.folder import TrialFileRefused, tail_in_folder

    folder = handle.get("trial_dir")
    if not isinstance(folder, str):
        return []
    out = []
    for name in handle_log_files(handle):
        try:  # the trial's code may have put a symlink (to /etc/shadow) or a FIFO there
            data, size = tail_in_folder(folder, name, LOG_TAIL_BYTES)
        except TrialFileRefused as exc:
            out.append({"name": name, "text": f"(not shown: {exc})"})
            continue
        except OSError:
            continue
        text = data.decode("utf-8", "replace")
        text = text if size <= LOG_TAIL_BYTES else "…" + text.split("\n", 1)[-1]
        out.append({"name": name, "text": _masked(text, secrets)})
    return out


def _masked(text: str, secrets: list[str]) -> str:
    from trialflow.config.redaction import REDACTED, mask_text
    from trialflow.from_airflow.secrets import masked_text

    for secret in sorted(set(secrets), key=len, reverse=True):
        if len(secret) >= MIN_MASKED_SECRET:
            text = text.replace(secret, REDACTED)
    return mask_text(masked_text(text))


def _location(handle: dict[str, Any]) -> str | None:
    from trialflow.platforms.base import handle_location

    return handle_location(handle)


def _web_url_template(engine: Any, experiment_id: str, platform: str | None) -> str | None:
    config = queries.experiment_config(engine, experiment_id)
    services = config.get("trainingService")
    for service in services if isinstance(services, list) else [services]:
        if isinstance(service, dict) and service.get("platform") == platform:
            return service.get("trialWebUrl")
    return None


@router.get("/api/experiments")
def experiments(user: User, dag_id: str | None = None) -> dict[str, Any]:
    """The experiments of the DAGs this user may read (``dag_id``: of one DAG), each with its run's state."""
    rows = [r.as_dict() for r in queries.list_experiments(store_engine())]
    if dag_id is not None:
        rows = [r for r in rows if r["dag_id"] == dag_id]
    allowed = {d: may_read_dag(user, d) for d in {r["dag_id"] for r in rows}}
    rows = [r for r in rows if allowed[r["dag_id"]]]
    runs, existing = dag_runs({(r["dag_id"], r["run_id"]) for r in rows if r["dag_id"] and r["run_id"]})
    for row in rows:
        row["state"], row["active"] = run_state(row, runs)
        row["dag_exists"] = row["dag_id"] in existing
    return {"experiments": rows}


@router.get("/api/experiments/{experiment_id}")
def experiment(user: User, experiment_id: str) -> dict[str, Any]:
    """One experiment: its config's summary, limits, progress, best trial and its runs' states."""
    authorize(user, experiment_id)
    summary = queries.experiment_summary(store_engine(), experiment_id)
    runs, existing = dag_runs({(summary["dag_id"], summary["run_id"])} if summary.get("dag_id") else set())
    summary["state"], summary["active"] = run_state(summary, runs)
    dag, run = summary.get("dag_id"), summary.get("run_id")
    summary["links"] = {
        "dag_run": f"{base_url()}dags/{quote(dag, safe='')}/runs/{quote(run, safe='')}"
        if dag in existing and run
        else None,
        "grid": f"{base_url()}dags/{quote(dag, safe='')}/grid" if dag in existing else None,
    }
    # What the pages' buttons need: whether this person may act, and what is queued.
    summary["may_edit"] = may_edit_dag(user, dag)
    summary["waiting"] = action_store().waiting_count(experiment_id)
    return summary


@router.get("/api/experiments/{experiment_id}/trials")
def trials(
    user: User,
    experiment_id: str,
    sort: str = "index",
    desc: bool = False,
    status: str = "",
    search: str = "",
    offset: Offset = 0,
    limit: Annotated[int, Query(ge=1, le=queries.MAX_PAGE)] = 50,
    indexes: str = "",
) -> dict[str, Any]:
    authorize(user, experiment_id)
    if sort not in ("index", "status", "metric", "duration", "platform") and not sort.startswith("param:"):
        raise HTTPException(
            status_code=422, detail="sort must be index, status, metric, duration, platform or param:NAME"
        )
    wanted = index_list(indexes, "indexes")
    return queries.trials_page(
        store_engine(),
        experiment_id,
        statuses=[s for s in status.split(",") if s] or None,
        search=search[:200],
        sort=sort,
        descending=desc,
        offset=offset,
        limit=limit,
        indexes=wanted,
    )


def plain_json(content: dict[str, Any]) -> Response:
    """A large answer of JSON values already (numbers, strings, lists, dicts from the store),
    sent as Airflow's own answers are but without FastAPI's jsonable_encoder, which walks every
    value again in Python: 70 of the chart data's ~175 ms at 100,000 trials."""
    return JSONResponse(content)


@router.get("/api/experiments/{experiment_id}/chart")
def chart(user: User, experiment_id: str) -> Response:
    """Every trial's parameters and final result, for the page's charts (parallel coordinates, history)."""
    authorize(user, experiment_id)
    return plain_json(queries.chart_data(store_engine(), experiment_id).as_dict())


@router.get("/api/experiments/{experiment_id}/curves")
def curves(user: User, experiment_id: str, trials: str = "") -> Response:
    """The intermediate results of the trials in ``trials`` (comma-separated indexes), bounded."""
    authorize(user, experiment_id)
    chosen = index_list(trials, "trials")
    return plain_json(queries.curves(store_engine(), experiment_id, chosen))


@router.get("/api/experiments/{experiment_id}/importance")
def importance(user: User, experiment_id: str) -> dict[str, Any]:
    """Each parameter's importance to the final result (Optuna's PED-ANOVA over the finished trials)."""
    authorize(user, experiment_id)
    return queries.importance(store_engine(), experiment_id)


@router.get("/api/experiments/{experiment_id}/trials/{trial_index}")
def trial(user: User, experiment_id: str, trial_index: TrialIndex) -> dict[str, Any]:
    """One trial: parameters, status, results, its task instance, who acted on it, its artifacts
    and the end of its output."""
    authorize(user, experiment_id)
    engine = store_engine()
    summary = queries.experiment_header(engine, experiment_id)  # not the counts over every trial
    try:
        detail = queries.trial_detail(engine, experiment_id, trial_index)
    except queries.UnknownExperiment:
        raise HTTPException(status_code=404, detail=f"no trial {trial_index} in {experiment_id}") from None
    handle = detail.get("handle") or {}
    run_id, map_index = _map_index(summary, trial_index)
    links = []
    trial_task = task_ids.task_id(task_ids.TRIAL, summary.get("task_group"))
    if summary.get("dag_id") and run_id is not None and map_index is not None:
        ti = _ti_url(summary["dag_id"], run_id, map_index, trial_task)
        links += [{"label": "Task instance", "href": ti}, {"label": "Task log", "href": ti + "?tab=logs"}]
    web = platform_url(
        _web_url_template(engine, experiment_id, handle.get("platform")), {**handle, "experiment_id": experiment_id}
    )
    if web:
        links.append({"label": "Platform", "href": web})
    if detail.get("mlflow_url"):  # its nested run (trialflow.queries.tracking: http(s) only)
        links.append({"label": "MLflow", "href": detail["mlflow_url"]})
    secrets = queries.secret_input_values(engine, experiment_id)
    detail.update(map_index=map_index, links=links, log=_log_tail(handle, secrets), location=_location(handle))
    detail["artifacts"], detail["artifacts_error"] = _artifact_list(experiment_id, detail)
    detail["may_edit"] = may_edit_dag(user, summary.get("dag_id"))
    detail["airflow_actions"] = airflow_actions(summary.get("dag_id"), run_id, map_index, trial_task)
    # the page offers a re-run only where the action is allowed: while its experiment runs
    runs, _ = dag_runs({(summary["dag_id"], summary["run_id"])} if summary.get("dag_id") else set())
    detail["experiment_state"], detail["experiment_active"] = run_state(summary, runs)
    return detail


#: Longest artifact name a download may ask for (checked before anything is looked up).
MAX_ARTIFACT_NAME = 1024
#: Bytes per chunk of a download streamed from the store.
ARTIFACT_CHUNK = 1024 * 1024


def _trial_artifacts(experiment_id: str, trial_id: str | None) -> Any:
    """The trial's artifacts in the store its experiment recorded at its start (None: it keeps none)."""
    from trialflow.checkpoints.artifacts import TrialArtifacts
    from trialflow.config.checkpoints import ARTIFACT_STORE_ATTR, ArtifactStore
    from trialflow.hooks.artifact_store import store_root

    where = ArtifactStore.from_attr(action_store().experiment_attr(experiment_id, ARTIFACT_STORE_ATTR))
    if where is None or not trial_id:
        return None
    return TrialArtifacts(store_root(where.url, where.conn_id), experiment_id, trial_id)


def _artifact_list(experiment_id: str, detail: dict[str, Any]) -> tuple[list[dict[str, Any]], str | None]:
    """The ended trial's artifacts (name and size), or why they cannot be listed now: a store
    that does not answer is said on the page, never a failed page."""
    if detail.get("status") not in TERMINAL_NAMES:
        return [], None  # kept when the trial ends
    try:
        artifacts = _trial_artifacts(experiment_id, detail.get("trial_id"))
        listed = artifacts.listed() if artifacts is not None else []
    except Exception as exc:  # the store's own words (a refused manifest, a store down), masked
        return [], _store_trouble(exc)
    return [{"name": f.name, "size": f.size} for f in listed], None


def _store_trouble(exc: BaseException) -> str:
    """What the artifact store said, as a reader may see it: Airflow's masker over it, bounded."""
    from trialflow.from_airflow.secrets import masked_text

    return f"the artifact store could not be read: {masked_text(str(exc))[:300]}"


@router.get("/api/experiments/{experiment_id}/trials/{trial_index}/artifacts/{name:path}")
def artifact(user: User, experiment_id: str, trial_index: TrialIndex, name: str) -> Response:
    """One of the trial's artifacts, streamed from the store: a reader of the DAG only, a name
    its manifest lists only (so no path leaves the trial's prefix)."""
    from trialflow.checkpoints.artifacts import UnknownArtifact

    authorize(user, experiment_id)
    if len(name) > MAX_ARTIFACT_NAME:
        raise HTTPException(status_code=422, detail=f"artifact name: at most {MAX_ARTIFACT_NAME} characters")
    try:
        detail = queries.trial_detail(store_engine(), experiment_id, trial_index, max_points=1)
    except queries.UnknownExperiment:
        raise HTTPException(status_code=404, detail=f"no trial {trial_index} in {experiment_id}") from None
    try:
        artifacts = _trial_artifacts(experiment_id, detail.get("trial_id"))
        if artifacts is None:
            raise HTTPException(status_code=404, detail=f"experiment {experiment_id} keeps no artifacts")
        source = artifacts.path(name).open("rb")  # opened here: a missing blob is this answer, not a cut stream
    except UnknownArtifact as exc:
        raise HTTPException(status_code=404, detail=str(exc)) from None
    except HTTPException:
        raise
    except Exception as exc:  # a refused manifest, a store down or without its provider
        raise HTTPException(status_code=502, detail=_store_trouble(exc)) from None

    def chunks() -> Iterator[bytes]:
        with source:
            while chunk := source.read(ARTIFACT_CHUNK):
                yield chunk

    filename = name.rsplit("/", 1)[-1]
    return StreamingResponse(
        chunks(),
        media_type="application/octet-stream",
        headers={"Content-Disposition": f"attachment; filename*=UTF-8''{quote(filename)}"},
    )


@router.get("/api/experiments/{experiment_id}/history")
def history(user: User, experiment_id: str) -> dict[str, Any]:
    """What people did to the experiment (kills, stops, limits, search spaces, added trials), oldest first."""
    from trialflow import steering

    dag_id = authorize(user, experiment_id)
    store = action_store()
    return {"actions": steering.history(store, experiment_id), "may_edit": may_edit_dag(user, dag_id)}


@router.get("/api/experiments/{experiment_id}/config")
def effective_config(user: User, experiment_id: str) -> dict[str, Any]:
    """The whole effective config, read-only, secrets masked as ``trialflow convert`` masks
    them (the store keeps it masked; masked again here by key), with the limits as changed."""
    from trialflow import steering
    from trialflow.config.redaction import redact

    dag_id = authorize(user, experiment_id)
    store = action_store()
    config = redact(store.experiment_attr(experiment_id, "config") or {})
    return {
        "config": config,
        "search_space": config.get("searchSpace"),
        "limits": steering.limits(store, experiment_id),
        "changed": steering.changed_limits(store, experiment_id),
        "waiting": steering.waiting_trials(store, experiment_id),
        # every version of the search space, the config's first (version 0, no time)
        "search_spaces": [v.to_attr() for v in steering.space_versions(store, experiment_id)],
        "may_edit": may_edit_dag(user, dag_id),
    }


def _download(chunks: Iterator[str], media_type: str, filename: str) -> Response:
    """A streamed attachment: 20,000 trials are written a chunk at a time, never held whole."""
    return StreamingResponse(
        chunks, media_type=media_type, headers={"Content-Disposition": f'attachment; filename="{quote(filename)}"'}
    )


@router.get("/api/experiments/{experiment_id}/export.csv")
def export_csv(user: User, experiment_id: str) -> Response:
    """Every trial as CSV (streamed), as ``trialflow export`` writes it."""
    authorize(user, experiment_id)
    return _download(queries.iter_csv(store_engine(), experiment_id), "text/csv", f"{experiment_id}-trials.csv")


@router.get("/api/experiments/{experiment_id}/trials/{trial_index}/intermediate.csv")
def export_intermediate(user: User, experiment_id: str, trial_index: TrialIndex) -> Response:
    """Every intermediate result of one trial (the page draws a thinned curve)."""
    authorize(user, experiment_id)
    try:
        points = queries.iter_intermediate_csv(store_engine(), experiment_id, trial_index)
    except queries.UnknownExperiment:
        raise HTTPException(status_code=404, detail=f"no trial {trial_index} in {experiment_id}") from None
    return _download(points, "text/csv", f"{experiment_id}-trial-{trial_index}-intermediate.csv")


@router.get("/api/experiments/{experiment_id}/export.json")
def export_json(user: User, experiment_id: str) -> Response:
    """Every trial as JSON (streamed), as ``trialflow export --format json`` writes it."""
    authorize(user, experiment_id)
    chunks = queries.iter_json(store_engine(), experiment_id)
    return _download(chunks, "application/json", f"{experiment_id}-trials.json")


@router.get("/api/resolve")
def resolve(
    user: User,
    dag_id: str,
    run_id: str,
    map_index: Annotated[int | None, Query(ge=-1, le=MAX_INT)] = None,
    task_id: Annotated[str | None, Query(max_length=250)] = None,
) -> dict[str, Any]:
    """The experiment (and trial) of a DAG run's task instance, for extra links, and every
    experiment of the run (one per experiment task group), for the run tab. ``task_id``: the
    task's id, whose group (``tune.trial``) says which of the run's experiments is meant."""
    if not may_read_dag(user, dag_id):
        raise HTTPException(status_code=403, detail="you may not read this DAG")
    group = task_id.rpartition(".")[0] or None if task_id is not None else None
    held: list[tuple[Any, int | None]] = []
    for row in queries.list_experiments(store_engine()):
        if row.dag_id != dag_id or (task_id is not None and row.task_group != group):
            continue
        summary = queries.experiment_summary(store_engine(), row.experiment_id)
        for raw in summary.get("runs", []):
            if raw.get("run_id") == run_id:
                # -1: an unmapped trial task (a hand-written DAG): its run's one trial
                index = None if map_index is None else RunWindow.parse(raw).first_index + max(map_index, 0)
                held.append((row, index))
                break
    if not held:
        raise HTTPException(status_code=404, detail="this DAG run has no trialflow experiment")
    held.sort(key=lambda found: found[0].task_group or "")
    first, index = held[0]
    return {
        "experiment_id": first.experiment_id,
        "trial_index": index,
        "experiments": [
            {"experiment_id": row.experiment_id, "task_group": row.task_group, "name": row.name} for row, _ in held
        ],
    }

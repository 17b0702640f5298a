"""The experiment pages' data: a FastAPI app the plugin mounts on Airflow's api-server.

Airflow does not protect a plugin's FastAPI app, so every data route here
depends on Airflow's own user resolution (``GetUserDep``: the UI's session
cookie or a bearer token) and asks the auth manager whether that user may
read the experiment's DAG: no session is 401, a DAG the user may not read is
403 (and its experiments never appear in a list). The store is read through
:mod:`trialflow.queries` (SQL, paginated); nothing here renders HTML.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote, urlsplit

from fastapi import Body, Depends, FastAPI, HTTPException, Query, Request
from fastapi import Path as PathParam
from fastapi.responses import FileResponse, Response, StreamingResponse

from trialflow import queries
from trialflow.ui.links import base_url, platform_url

log = logging.getLogger(__name__)
STATIC = Path(__file__).parent / "static"
#: Trial indexes, offsets and map indexes are stored as 32-bit integers at most: a larger number
#: from a URL is the caller's mistake (422), not an OverflowError in the database driver (500).
MAX_INT = 2**31 - 1
Offset = Annotated[int, Query(ge=0, le=MAX_INT)]
TrialIndex = Annotated[int, PathParam(ge=0, le=MAX_INT)]


def index_list(text: str, what: str) -> list[int] | None:
    """Comma-separated trial indexes from a query string, each within 0..MAX_INT (else 422)."""
    if not text:
        return None
    try:
        values = [int(i) for i in text.split(",") if i.strip()]
    except ValueError:
        raise HTTPException(status_code=422, detail=f"{what}: comma-separated trial indexes") from None
    if any(not 0 <= v <= MAX_INT for v in values):
        raise HTTPException(status_code=422, detail=f"{what}: trial indexes are 0..{MAX_INT}")
    return values


BUNDLE = STATIC / "trialflow.js"
LOG_TAIL_BYTES = 16 * 1024


# -- the store and Airflow --------------------------------------------------------------------


def store_engine() -> Any:
    """The engine of the store named by the ``trialflow_default`` connection (read in the
    api-server the way Airflow reads any connection), else the embedded default."""
    from trialflow.hooks.experiment_store import DEFAULT_CONN_ID, default_store_url, store_url_from_connection

    try:
        from airflow.models.connection import Connection

        url = store_url_from_connection(Connection.get_connection_from_secrets(DEFAULT_CONN_ID), DEFAULT_CONN_ID)
    except Exception as exc:  # AirflowNotFoundException and its variants: the embedded store
        if "not defined" not in str(exc) and "not found" not in str(exc).lower():
            log.warning(
                "trialflow store connection %s unreadable (%s); using the default store",
                DEFAULT_CONN_ID,
                type(exc).__name__,
            )
        url = default_store_url()
    from trialflow.tuning.store_urls import engine_for

    return engine_for(url)


def action_store() -> Any:
    """The experiment store the actions write to (the same database the pages read)."""

    return _store_for(store_engine().url.render_as_string(hide_password=False))


@lru_cache(maxsize=4)
def _store_for(url: str) -> Any:
    from trialflow.tuning.experiment_store import ExperimentStore

    return ExperimentStore(url)


def _user_dep() -> Any:
    from airflow.api_fastapi.core_api.security import get_user

    return get_user


User = Annotated[Any, Depends(_user_dep())]


def may_read_dag(user: Any, dag_id: str | None) -> bool:
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import DagDetails

    return bool(get_auth_manager().is_authorized_dag(method="GET", details=DagDetails(id=dag_id), user=user))


def may_edit_dag(user: Any, dag_id: str | None) -> bool:
    """The check Airflow's own API makes before a task instance's state may change."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails

    return bool(
        get_auth_manager().is_authorized_dag(
            method="PUT", access_entity=DagAccessEntity.TASK_INSTANCE, details=DagDetails(id=dag_id), user=user
        )
    )


def user_name(user: Any) -> str:
    return str(user.get_name())


def audit(user: Any, event: str, dag_id: str | None, extra: dict[str, Any]) -> None:
    """Write the action to Airflow's audit log (who, what, when), beside Airflow's own events."""
    from airflow.models.log import Log
    from airflow.utils.session import create_session

    with create_session() as session:
        session.add(
            Log(event=f"trialflow.{event}", owner=user_name(user), dag_id=dag_id, extra=json.dumps(extra, default=str))
        )


def _dag_runs(pairs: set[tuple[str, str]]) -> tuple[dict[tuple[str, str], str], set[str]]:
    """(state of each (dag_id, run_id) that exists, dag ids that exist)."""
    if not pairs:
        return {}, set()
    from airflow.models.dag import DagModel
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select

    dag_ids = {d for d, _ in pairs}
    with create_session() as session:
        runs = session.execute(
            select(DagRun.dag_id, DagRun.run_id, DagRun.state).where(DagRun.dag_id.in_(dag_ids))
        ).all()
        existing = set(session.scalars(select(DagModel.dag_id).where(DagModel.dag_id.in_(dag_ids))))
    return {(d, r): str(getattr(s, "value", s)) for d, r, s in runs if (d, r) in pairs}, existing


LIVE_RUN_STATES = frozenset({"queued", "running"})


def run_state(row: dict[str, Any], runs: dict[tuple[str, str], str]) -> tuple[str, bool]:
    """(state, active) of an experiment row: its DAG run's word when the run still exists.

    The run, not the trial counts, says whether the experiment is still going: between two
    waves of trials (the previous ones ended, the next not yet asked) no trial is waiting or
    running, yet the run is, and a page that stopped refreshing then never saw the rest.
    Without a run (its DAG deleted, or the CLI's own runs), the trials' statuses are all there is.
    An experiment a person stopped reads "stopped" once its run is over, never "success".
    """
    dag_id, run_id = row.get("dag_id"), row.get("run_id")
    state = runs.get((dag_id, run_id)) if dag_id and run_id else None
    if state in LIVE_RUN_STATES:
        return str(state), True
    if row.get("stopped"):  # a person's stop is what ended it, whatever the run's end step said
        return "stopped", False
    if state:
        return state, False
    return ("running", True) if row.get("active") else ("finished", False)


def _authorize(user: Any, experiment_id: str) -> str | None:
    """The experiment's DAG id, if the experiment exists and ``user`` may read that DAG."""
    try:
        dag_id = queries.experiment_dag_id(store_engine(), experiment_id)
    except queries.UnknownExperiment:
        raise HTTPException(status_code=404, detail=f"no experiment {experiment_id!r}") from None
    if not may_read_dag(user, dag_id):
        raise HTTPException(status_code=403, detail="you may not read this experiment's DAG")
    return dag_id


def allowed_origins(scheme: str, netloc: str, base_url: str | None) -> set[str]:
    """The origins an action may come from: the address the request reached (its scheme as the
    api-server sees it: uvicorn applies X-Forwarded-Proto only when Airflow runs with
    ``--proxy-headers`` from a trusted proxy) and the origin of ``[api] base_url``, the public
    address Airflow's own settings give when it sits behind a proxy. Never a client's
    ``X-Forwarded-Host``: any client sends one, so trusting it let a page name its own origin."""
    allowed = {f"{scheme}://{netloc}".lower()}
    if base_url and "://" in base_url:
        public = urlsplit(base_url)
        if public.scheme in ("http", "https") and public.netloc:
            allowed.add(f"{public.scheme}://{public.netloc}".lower())
    return allowed


def same_origin(request: Request) -> None:
    """A browser's action must come from the pages themselves: its Origin (sent with every
    POST and PATCH) is the api-server's own. Airflow's session cookie is SameSite=Lax already;
    this also refuses a page on a sibling host of the same site. Clients with a bearer token
    (no Origin) are not browsers and are unaffected."""
    from airflow.configuration import conf

    origin = request.headers.get("origin")
    if origin is None:
        return
    allowed = allowed_origins(request.url.scheme, request.url.netloc, conf.get("api", "base_url", fallback=None))
    if origin.rstrip("/").lower() not in allowed:
        raise HTTPException(
            status_code=403, detail="actions are taken from trialflow's own pages (cross-origin refused)"
        )


async def bounded_body(request: Request) -> None:
    """An action's body is read only up to MAX_ACTION_BODY (413 past it, before any value in
    it is looked at): a real one is a few hundred bytes."""
    from trialflow.limits import MAX_ACTION_BODY

    declared = request.headers.get("content-length", "")
    if declared.isascii() and declared.isdigit() and len(declared) < 18 and int(declared) > MAX_ACTION_BODY:
        raise HTTPException(status_code=413, detail=f"the request body is over {MAX_ACTION_BODY} bytes")
    if len(await request.body()) > MAX_ACTION_BODY:
        raise HTTPException(status_code=413, detail=f"the request body is over {MAX_ACTION_BODY} bytes")


SameOrigin = Depends(same_origin)
BoundedBody = Depends(bounded_body)


def _authorize_edit(user: Any, experiment_id: str) -> str | None:
    """As _authorize, and ``user`` may change the DAG's task instances (else 403, nothing done)."""
    dag_id = _authorize(user, experiment_id)
    if not may_edit_dag(user, dag_id):
        raise HTTPException(status_code=403, detail="you may read this experiment's DAG but not act on it")
    return dag_id


def _live_run(dag_id: str | None, experiment_id: str) -> str:
    """The experiment's DAG run, if it is queued or running (else 409: limits are a running
    experiment's; an ended one is re-run, not changed)."""
    run_id = action_store().experiment_attr(experiment_id, "run_id")
    states, _ = _dag_runs({(dag_id, run_id)} if dag_id and run_id else set())
    state = states.get((dag_id, run_id)) if dag_id and run_id else None
    if state not in LIVE_RUN_STATES:
        raise HTTPException(
            status_code=409,
            detail=f"experiment {experiment_id} is not running (its DAG run is {state or 'gone'}): nothing changed",
        )
    return str(run_id)


def request_parse(dag_id: str) -> bool:
    """Ask the dag-processor to parse the DAG's file now (what Airflow's reparse button does):
    the new trialConcurrency is read at that parse. False if the DAG is not known."""
    from airflow.models.dag import DagModel
    from airflow.models.dagbag import DagPriorityParsingRequest
    from airflow.utils.session import create_session
    from sqlalchemy.exc import IntegrityError

    with create_session() as session:
        dag = session.get(DagModel, dag_id)
        if dag is None or not dag.relative_fileloc:
            return False
        bundle, file = dag.bundle_name, dag.relative_fileloc
    try:
        with create_session() as session:
            session.merge(DagPriorityParsingRequest(bundle_name=bundle, relative_fileloc=file))
    except IntegrityError:
        # A parse of that file is already asked for (two changes within seconds): that parse
        # reads the newest limit, so this is not an error (it answered 500 after the change).
        pass
    return True


#: Airflow's audit events that can stop a trial task (its own REST routes' names).
STOPPING_EVENTS = (
    "patch_task_instance",
    "patch_task_instance_dry_run",
    "post_clear_task_instances",
    "patch_dag_run",
    "clear_dag_run",
    "bulk_task_instances",
)


def airflow_actions(dag_id: str | None, run_id: str | None, map_index: int | None) -> list[dict[str, Any]]:
    """Who acted on the trial's task or its DAG run with Airflow's own buttons (Airflow's audit
    log): the store says what stopped a trial ("its task was marked failed"), this says who."""
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
        if task_id not in (None, "trial") or event == "patch_task_instance_dry_run":
            continue
        if task_id == "trial" and str(details.get("map_index", map_index)) != str(map_index):
            continue  # another trial's task
        named = details.get("task_ids") if event == "post_clear_task_instances" else None
        if isinstance(named, list) and not any(t == "trial" or t == ["trial", map_index] for t in named):
            continue  # a clear of other tasks
        what = details.get("new_state") or details.get("state") or ("clear" if "clear" in event else None)
        found.append({"at": dttm.timestamp() if dttm else None, "by": owner, "event": event, "state": what})
    return found[:10]


def _refused(exc: Exception) -> HTTPException:
    """An action refused: 404 for an unknown target, 422 for a bad value, 409 otherwise."""
    from trialflow.steering import BadInput, UnknownTarget

    code = 404 if isinstance(exc, UnknownTarget) else 422 if isinstance(exc, BadInput) else 409
    return HTTPException(status_code=code, detail=str(exc))


def _map_index(summary: dict[str, Any], trial_index: int) -> tuple[str | None, int | None]:
    """(run_id, map index) of the task instance that ran trial ``trial_index``."""
    for window in summary.get("runs", []):
        first, count = int(window.get("first_index", 0)), int(window.get("count", 0))
        if first <= trial_index < first + count:
            return window.get("run_id"), trial_index - first
    return summary.get("run_id"), trial_index


def _ti_url(dag_id: str, run_id: str, map_index: int) -> str:
    return f"{base_url()}dags/{quote(dag_id, safe='')}/runs/{quote(run_id, safe='')}/tasks/trial/mapped/{map_index}"


def _log_tail(handle: dict[str, Any]) -> list[dict[str, str]]:
    """The end of the trial's output files that its platform says Airflow's machines can read
    (the handle's ``log_files``: a local trial's stdout and stderr; remote and Kubernetes
    trials' logs stay where they ran)."""
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
        out.append({"name": name, "text": text if size <= LOG_TAIL_BYTES else "…" + text.split("\n", 1)[-1]})
    return out


def _location(handle: dict[str, Any]) -> str | None:
    from trialflow.platforms.base import handle_location

    return handle_location(handle)


def _web_url_template(summary: dict[str, Any], platform: str | None) -> str | None:
    config = queries_config(summary)
    services = config.get("trainingService")
    for service in services if isinstance(services, list) else [services]:
        if isinstance(service, dict) and service.get("platform") == platform:
            return service.get("trialWebUrl")
    return None


def queries_config(summary: dict[str, Any]) -> dict[str, Any]:
    engine = store_engine()
    with engine.connect() as conn:
        sid = queries.study_id_of(conn, summary["experiment_id"])
        import sqlalchemy as sa

        raw = conn.execute(
            sa.select(queries.STUDY_ATTRS.c.value_json).where(
                queries.STUDY_ATTRS.c.study_id == sid, queries.STUDY_ATTRS.c.key == "config"
            )
        ).scalar()
    return json.loads(raw) if raw else {}


# -- the app ------------------------------------------------------------------------------------


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    # Importance needs Optuna's evaluators and SciPy: ~1 s of imports, paid in the background at
    # start rather than by the first person who opens an experiment.
    threading.Thread(target=lambda: __import__("optuna.importance"), daemon=True, name="trialflow-warm").start()
    yield


def create_app() -> FastAPI:
    app = FastAPI(
        title="trialflow",
        description="trialflow experiment pages (data for the Airflow UI plugin)",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        lifespan=_lifespan,
    )

    @app.get("/static/trialflow.js", include_in_schema=False)
    def bundle() -> Response:
        # The page script is public (it holds no data); every data route below needs a user.
        return FileResponse(BUNDLE, media_type="text/javascript", headers={"Cache-Control": "no-cache"})

    @app.get("/static/experiments.svg", include_in_schema=False)
    def icon() -> Response:
        return FileResponse(STATIC / "experiments.svg", media_type="image/svg+xml")

    @app.get("/api/experiments")
    def experiments(user: User, dag_id: str | None = None) -> dict[str, Any]:
        rows = [r.as_dict() for r in queries.list_experiments(store_engine())]
        if dag_id is not None:
            rows = [r for r in rows if r["dag_id"] == dag_id]
        allowed = {d: may_read_dag(user, d) for d in {r["dag_id"] for r in rows}}
        rows = [r for r in rows if allowed[r["dag_id"]]]
        runs, existing = _dag_runs({(r["dag_id"], r["run_id"]) for r in rows if r["dag_id"] and r["run_id"]})
        for row in rows:
            row["state"], row["active"] = run_state(row, runs)
            row["dag_exists"] = row["dag_id"] in existing
        return {"experiments": rows}

    @app.get("/api/experiments/{experiment_id}")
    def experiment(user: User, experiment_id: str) -> dict[str, Any]:
        _authorize(user, experiment_id)
        summary = queries.experiment_summary(store_engine(), experiment_id)
        runs, existing = _dag_runs({(summary["dag_id"], summary["run_id"])} if summary.get("dag_id") else set())
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

    @app.get("/api/experiments/{experiment_id}/trials")
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
        _authorize(user, experiment_id)
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

    @app.get("/api/experiments/{experiment_id}/chart")
    def chart(user: User, experiment_id: str) -> dict[str, Any]:
        _authorize(user, experiment_id)
        return {"trials": queries.chart_data(store_engine(), experiment_id)}

    @app.get("/api/experiments/{experiment_id}/curves")
    def curves(user: User, experiment_id: str, trials: str = "") -> dict[str, Any]:
        _authorize(user, experiment_id)
        chosen = index_list(trials, "trials")
        return queries.curves(store_engine(), experiment_id, chosen)

    @app.get("/api/experiments/{experiment_id}/importance")
    def importance(user: User, experiment_id: str) -> dict[str, Any]:
        _authorize(user, experiment_id)
        return queries.importance(store_engine(), experiment_id)

    @app.get("/api/experiments/{experiment_id}/trials/{trial_index}")
    def trial(user: User, experiment_id: str, trial_index: TrialIndex) -> dict[str, Any]:
        _authorize(user, experiment_id)
        summary = queries.experiment_summary(store_engine(), experiment_id)
        try:
            detail = queries.trial_detail(store_engine(), experiment_id, trial_index)
        except queries.UnknownExperiment:
            raise HTTPException(status_code=404, detail=f"no trial {trial_index} in {experiment_id}") from None
        handle = detail.get("handle") or {}
        run_id, map_index = _map_index(summary, trial_index)
        links = []
        if summary.get("dag_id") and run_id is not None and map_index is not None:
            ti = _ti_url(summary["dag_id"], run_id, map_index)
            links += [{"label": "Task instance", "href": ti}, {"label": "Task log", "href": ti + "?tab=logs"}]
        web = platform_url(
            _web_url_template(summary, handle.get("platform")), {**handle, "experiment_id": experiment_id}
        )
        if web:
            links.append({"label": "Platform", "href": web})
        detail.update(map_index=map_index, links=links, log=_log_tail(handle), location=_location(handle))
        detail["may_edit"] = may_edit_dag(user, summary.get("dag_id"))
        detail["airflow_actions"] = airflow_actions(summary.get("dag_id"), run_id, map_index)
        # the page offers a re-run only where the action is allowed: while its experiment runs
        runs, _ = _dag_runs({(summary["dag_id"], summary["run_id"])} if summary.get("dag_id") else set())
        detail["experiment_state"], detail["experiment_active"] = run_state(summary, runs)
        return detail

    # -- actions: POST only, edit permission on the DAG, Airflow's audit log --------------------

    @app.get("/api/experiments/{experiment_id}/history")
    def history(user: User, experiment_id: str) -> dict[str, Any]:
        from trialflow import steering

        dag_id = _authorize(user, experiment_id)
        store = action_store()
        return {"actions": steering.history(store, experiment_id), "may_edit": may_edit_dag(user, dag_id)}

    @app.post("/api/experiments/{experiment_id}/trials/{trial_index}/kill", dependencies=[SameOrigin, BoundedBody])
    def kill(user: User, experiment_id: str, trial_index: TrialIndex) -> dict[str, Any]:
        from trialflow import steering

        dag_id = _authorize_edit(user, experiment_id)
        try:
            record = steering.kill_trial(action_store(), experiment_id, trial_index, user_name(user))
        except steering.ActionRefused as exc:
            raise _refused(exc) from None
        audit(user, "kill_trial", dag_id, {"experiment_id": experiment_id, "trial_index": trial_index})
        return {"trial_id": record.trial_id, "trial_index": trial_index, "requested": "stop"}

    @app.post("/api/experiments/{experiment_id}/stop", dependencies=[SameOrigin, BoundedBody])
    def stop(user: User, experiment_id: str) -> dict[str, Any]:
        from trialflow import steering

        dag_id = _authorize_edit(user, experiment_id)
        try:
            stopped = steering.stop_experiment(action_store(), experiment_id, user_name(user))
        except steering.ActionRefused as exc:
            raise _refused(exc) from None
        audit(user, "stop_experiment", dag_id, {"experiment_id": experiment_id})
        return {"runs": stopped.marked, "trials": [t.trial_index for t in stopped.asked]}

    @app.patch("/api/experiments/{experiment_id}/limits", dependencies=[SameOrigin, BoundedBody])
    def change_limits(user: User, experiment_id: str, changes: Annotated[dict[str, Any], Body()]) -> dict[str, Any]:
        from trialflow import steering

        dag_id = _authorize_edit(user, experiment_id)
        try:
            steering.check_limits(changes)  # a bad value is refused before anything is read
        except steering.ActionRefused as exc:
            raise _refused(exc) from None
        _live_run(dag_id, experiment_id)
        store = action_store()
        try:
            limits = steering.change_limits(store, experiment_id, user_name(user), changes)
        except steering.ActionRefused as exc:
            raise _refused(exc) from None
        parsed = "trialConcurrency" in changes and bool(dag_id) and request_parse(str(dag_id))
        audit(user, "change_limits", dag_id, {"experiment_id": experiment_id, **changes})
        return {"limits": limits, "dag_parse_requested": parsed}

    @app.post("/api/experiments/{experiment_id}/trials", dependencies=[SameOrigin, BoundedBody])
    def add_trial(user: User, experiment_id: str, body: Annotated[dict[str, Any], Body()]) -> dict[str, Any]:
        from trialflow import steering

        dag_id = _authorize_edit(user, experiment_id)
        store = action_store()
        try:
            steering.check_parameters(store, experiment_id, body.get("parameters"))
            _live_run(dag_id, experiment_id)
            steering.add_trial(store, experiment_id, body.get("parameters"), user_name(user))
        except steering.ActionRefused as exc:
            raise _refused(exc) from None
        audit(user, "add_trial", dag_id, {"experiment_id": experiment_id, "parameters": body.get("parameters")})
        return {
            # A count, not the queue: an answer that grew with each trial added (150 KB at a thousand).
            "waiting": store.waiting_count(experiment_id),
            "limits": steering.limits(store, experiment_id),
        }

    @app.post("/api/experiments/{experiment_id}/trials/{trial_index}/rerun", dependencies=[SameOrigin, BoundedBody])
    def rerun(user: User, experiment_id: str, trial_index: TrialIndex) -> dict[str, Any]:
        return _rerun(user, experiment_id, [trial_index])

    @app.post("/api/experiments/{experiment_id}/rerun-failed", dependencies=[SameOrigin, BoundedBody])
    def rerun_failed(user: User, experiment_id: str) -> dict[str, Any]:
        return _rerun(user, experiment_id, None)

    def _rerun(user: Any, experiment_id: str, indexes: list[int] | None) -> dict[str, Any]:
        from trialflow import steering

        dag_id = _authorize_edit(user, experiment_id)
        store = action_store()
        try:
            _live_run(dag_id, experiment_id)
            rerun = steering.rerun_trials(store, experiment_id, user_name(user), indexes)
        except steering.ActionRefused as exc:
            raise _refused(exc) from None
        audit(user, "rerun_trials", dag_id, {"experiment_id": experiment_id, "trial_indexes": rerun})
        return {"rerun": rerun, "waiting": store.waiting_count(experiment_id)}

    @app.get("/api/experiments/{experiment_id}/config")
    def effective_config(user: User, experiment_id: str) -> dict[str, Any]:
        """The whole effective config, read-only, secrets masked as ``trialflow convert`` masks
        them (the store keeps it masked; masked again here by key), with the limits as changed."""
        from trialflow import steering
        from trialflow.config.redaction import redact

        dag_id = _authorize(user, experiment_id)
        store = action_store()
        config = redact(store.experiment_attr(experiment_id, "config") or {})
        return {
            "config": config,
            "search_space": config.get("searchSpace"),
            "limits": steering.limits(store, experiment_id),
            "changed": steering.changed_limits(store, experiment_id),
            "waiting": steering.waiting_trials(store, experiment_id),
            "may_edit": may_edit_dag(user, dag_id),
        }

    @app.get("/api/experiments/{experiment_id}/export.csv")
    def export_csv(user: User, experiment_id: str) -> Response:
        _authorize(user, experiment_id)
        # Streamed: 20,000 trials are written a chunk at a time, never held whole.
        return StreamingResponse(
            queries.iter_csv(store_engine(), experiment_id),
            media_type="text/csv",
            headers={"Content-Disposition": f'attachment; filename="{quote(experiment_id)}-trials.csv"'},
        )

    @app.get("/api/experiments/{experiment_id}/trials/{trial_index}/intermediate.csv")
    def export_intermediate(user: User, experiment_id: str, trial_index: TrialIndex) -> Response:
        """Every intermediate result of one trial (the page draws a thinned curve), streamed."""
        _authorize(user, experiment_id)
        try:
            points = queries.iter_intermediate_csv(store_engine(), experiment_id, trial_index)
        except queries.UnknownExperiment:
            raise HTTPException(status_code=404, detail=f"no trial {trial_index} in {experiment_id}") from None
        name = quote(f"{experiment_id}-trial-{trial_index}-intermediate.csv")
        return StreamingResponse(
            points, media_type="text/csv", headers={"Content-Disposition": f'attachment; filename="{name}"'}
        )

    @app.get("/api/experiments/{experiment_id}/export.json")
    def export_json(user: User, experiment_id: str) -> Response:
        _authorize(user, experiment_id)
        return StreamingResponse(
            queries.iter_json(store_engine(), experiment_id),
            media_type="application/json",
            headers={"Content-Disposition": f'attachment; filename="{quote(experiment_id)}-trials.json"'},
        )

    @app.get("/api/resolve")
    def resolve(
        user: User, dag_id: str, run_id: str, map_index: Annotated[int | None, Query(ge=-1, le=MAX_INT)] = None
    ) -> dict[str, Any]:
        """The experiment (and trial) of a DAG run's task instance: for extra links and the run tab."""
        if not may_read_dag(user, dag_id):
            raise HTTPException(status_code=403, detail="you may not read this DAG")
        found = [r for r in queries.list_experiments(store_engine()) if r.dag_id == dag_id]
        for row in found:
            summary = queries.experiment_summary(store_engine(), row.experiment_id)
            for window in summary.get("runs", []):
                if window.get("run_id") == run_id:
                    # -1: an unmapped trial task (a hand-written DAG): its run's one trial
                    index = None if map_index is None else int(window.get("first_index", 0)) + max(map_index, 0)
                    return {"experiment_id": row.experiment_id, "trial_index": index}
        raise HTTPException(status_code=404, detail="this DAG run has no trialflow experiment")

    return app


app = create_app() if os.environ.get("TRIALFLOW_NO_UI_APP") != "1" else None

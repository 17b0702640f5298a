"""Who may see and do what on the experiment pages, and the guards every route passes.

Airflow does not protect a plugin's FastAPI app, so every data route depends on Airflow's own
user resolution (``GetUserDep``: the UI's session cookie or a bearer token) and asks the auth
manager whether that user may read (or, for an action, edit) the experiment's DAG: no session
is 401, a DAG the user may not read is 403 (and its experiments never appear in a list). Also
here: the store the routes read and write, Airflow's run states, the origin and body-size
guards of the actions, and how a refused action becomes an HTTP status.
"""

from __future__ import annotations

import json
import logging
from functools import lru_cache
from typing import Annotated, Any
from urllib.parse import urlsplit

from fastapi import BackgroundTasks, Depends, HTTPException, Query, Request
from fastapi import Path as PathParam

from trialflow import queries

log = logging.getLogger(__name__)
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
    from trialflow.store.urls import engine_for

    engine = engine_for(url)
    _check_schema(engine.url.render_as_string(hide_password=False), engine)
    return engine


@lru_cache(maxsize=8)
def _check_schema(url: str, engine: Any) -> None:
    """A store of another trialflow's schema answers 503 saying what to run (trialflow.tuning.
    store_schema), not a 500 from a missing column; a store found current is not read again
    (a refusal is not cached: the next request sees the upgrade)."""
    from trialflow.store.schema import refusal, state
    from trialflow.store.version import StoreSchemaError

    found = state(engine)
    if not (found.current or found.fresh):
        raise HTTPException(status_code=503, detail=str(StoreSchemaError(refusal(engine, found))))


def action_store() -> Any:
    """The experiment store the actions write to (the same database the pages read)."""

    return _store_for(store_engine().url.render_as_string(hide_password=False))


@lru_cache(maxsize=4)
def _store_for(url: str) -> Any:
    from trialflow.store.experiment_store import ExperimentStore

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


def dag_runs(pairs: set[tuple[str, str]]) -> tuple[dict[tuple[str, str], str], set[str]]:
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
    An experiment a person stopped reads "stopped" once its run is over, never "success". One
    whose runs are all over (its end step ran) reads "finished" while its DAG run goes on with
    later tasks (an approval waiting for a person): it said "running" and offered steering
    that every action refused.
    """
    dag_id, run_id = row.get("dag_id"), row.get("run_id")
    state = runs.get((dag_id, run_id)) if dag_id and run_id else None
    if state in LIVE_RUN_STATES and not row.get("runs_over"):
        return str(state), True
    if row.get("stopped"):  # a person's stop is what ended it, whatever the run's end step said
        return "stopped", False
    if state in LIVE_RUN_STATES:
        return "finished", False
    if state:
        return state, False
    return ("running", True) if row.get("active") else ("finished", False)


def authorize(user: Any, experiment_id: str) -> str | None:
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
    it is looked at): a real one is a few hundred bytes. A JSON body naming a key twice in one
    object is refused (422): FastAPI's reader keeps the last one without a word, where the
    CLI and the configs refuse it, so a space sent with two ``x`` changed to the second."""
    import json

    from trialflow.config.files import DuplicateJsonKey, refuse_duplicates
    from trialflow.config.units import whole_number
    from trialflow.limits import MAX_ACTION_BODY

    declared = whole_number(request.headers.get("content-length", ""))
    if declared is not None and declared > MAX_ACTION_BODY:
        raise HTTPException(status_code=413, detail=f"the request body is over {MAX_ACTION_BODY} bytes")
    body = await request.body()
    if len(body) > MAX_ACTION_BODY:
        raise HTTPException(status_code=413, detail=f"the request body is over {MAX_ACTION_BODY} bytes")
    try:
        json.loads(body or b"null", object_pairs_hook=refuse_duplicates)
    except DuplicateJsonKey as exc:
        raise HTTPException(status_code=422, detail=f"the request body: {exc}; nothing changed") from None
    except RecursionError:  # [[[[... within the size bound: deeper than Python's reader goes
        raise HTTPException(status_code=422, detail="the request body is nested too deeply; nothing changed") from None
    except ValueError:
        return  # not JSON: FastAPI's own reader answers that (422), naming where


SameOrigin = Depends(same_origin)
BoundedBody = Depends(bounded_body)


def authorize_edit(user: Any, experiment_id: str) -> str | None:
    """As _authorize, and ``user`` may change the DAG's task instances (else 403, nothing done)."""
    dag_id = authorize(user, experiment_id)
    if not may_edit_dag(user, dag_id):
        raise HTTPException(status_code=403, detail="you may read this experiment's DAG but not act on it")
    return dag_id


def live_run(dag_id: str | None, experiment_id: str) -> str:
    """The experiment's DAG run, if it is queued or running (else 409: limits are a running
    experiment's; an ended one is re-run, not changed)."""
    run_id = action_store().experiment_attr(experiment_id, "run_id")
    states, _ = dag_runs({(dag_id, run_id)} if dag_id and run_id else set())
    state = states.get((dag_id, run_id)) if dag_id and run_id else None
    if state not in LIVE_RUN_STATES:
        raise HTTPException(
            status_code=409,
            detail=f"experiment {experiment_id} is not running (its DAG run is {state or 'gone'}): nothing changed",
        )
    return str(run_id)


def request_parse(experiment_id: str, dag_id: str, background: BackgroundTasks) -> bool:
    """Ask the dag-processor to parse the experiment's DAG file now, and again after answering
    until the scheduler's DAG shows the new trialConcurrency (trialflow.from_airflow.parse_requests).
    False if the DAG is not known."""
    from trialflow.experiment import GROUP_ATTR
    from trialflow.from_airflow import parse_requests

    if not parse_requests.request_parse(dag_id):
        return False
    store = action_store()
    group = store.experiment_attr(experiment_id, GROUP_ATTR)
    background.add_task(parse_requests.parse_until_shown, store.engine, dag_id, group)
    return True


def refused(exc: Exception) -> HTTPException:
    """An action refused: 404 for an unknown target, 422 for a bad value, 409 otherwise."""
    from trialflow.steering import BadInput, UnknownTarget

    code = 404 if isinstance(exc, UnknownTarget) else 422 if isinstance(exc, BadInput) else 409
    return HTTPException(status_code=code, detail=str(exc))

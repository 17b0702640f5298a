"""Read models of the experiment store, for the pages, the CLI and exports. No Airflow.

Why plain SQL over Optuna's tables instead of ``study.get_trials()``: a page of
50 trials out of 2,000, sorted by a parameter and filtered by status, must
not load 2,000 trials and 200,000 intermediate values into Python. Every
query here aggregates, sorts, filters and paginates in the database (SQLite
or PostgreSQL), with bound parameters only: a sort key or a search text is
never SQL. The tables are declared here from Optuna's RDB schema (stable
since schema version 12) rather than imported from Optuna's private models.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Iterable, Literal, Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from trialflow.tuning.store import TRIAL_INDEX

_META = sa.MetaData()
STUDIES = sa.Table("studies", _META, sa.Column("study_id", sa.Integer, primary_key=True),
                   sa.Column("study_name", sa.String(512)))
DIRECTIONS = sa.Table("study_directions", _META, sa.Column("study_direction_id", sa.Integer, primary_key=True),
                      sa.Column("direction", sa.String(8)), sa.Column("study_id", sa.Integer),
                      sa.Column("objective", sa.Integer))
STUDY_ATTRS = sa.Table("study_user_attributes", _META, sa.Column("study_user_attribute_id", sa.Integer,
                                                                 primary_key=True),
                       sa.Column("study_id", sa.Integer), sa.Column("key", sa.String(512)),
                       sa.Column("value_json", sa.Text))
TRIALS = sa.Table("trials", _META, sa.Column("trial_id", sa.Integer, primary_key=True),
                  sa.Column("number", sa.Integer), sa.Column("study_id", sa.Integer),
                  sa.Column("state", sa.String(8)), sa.Column("datetime_start", sa.DateTime),
                  sa.Column("datetime_complete", sa.DateTime))
TRIAL_ATTRS = sa.Table("trial_user_attributes", _META, sa.Column("trial_user_attribute_id", sa.Integer,
                                                                 primary_key=True),
                       sa.Column("trial_id", sa.Integer), sa.Column("key", sa.String(512)),
                       sa.Column("value_json", sa.Text))
VALUES = sa.Table("trial_values", _META, sa.Column("trial_value_id", sa.Integer, primary_key=True),
                  sa.Column("trial_id", sa.Integer), sa.Column("objective", sa.Integer),
                  sa.Column("value", sa.Float), sa.Column("value_type", sa.String(7)))
INTERMEDIATE = sa.Table("trial_intermediate_values", _META,
                        sa.Column("trial_intermediate_value_id", sa.Integer, primary_key=True),
                        sa.Column("trial_id", sa.Integer), sa.Column("step", sa.Integer),
                        sa.Column("intermediate_value", sa.Float),
                        sa.Column("intermediate_value_type", sa.String(7)))

#: The trial attributes a row shows (Optuna user attributes written by trialflow's store).
ROW_ATTRS = ("trial_id", "nni_status", "parameters", "final_metric", "message", "handle", "service_index",
             "started_at")
STATUSES = ("WAITING", "RUNNING", "SUCCEEDED", "FAILED", "USER_CANCELED", "SYS_CANCELED", "EARLY_STOPPED")
ACTIVE = ("WAITING", "RUNNING")
SortKey = str  # "index" | "status" | "metric" | "duration" | "platform" | "param:<name>"
MAX_PAGE = 500


class UnknownExperiment(LookupError):
    """No experiment (study) of that id in the store."""


def _json(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def _epoch(value: datetime | None) -> float | None:
    """Optuna stores naive local times (datetime.now()); as epoch seconds for the pages."""
    return None if value is None else value.timestamp()


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _dialect(engine: Engine) -> str:
    return engine.dialect.name


# -- experiments ---------------------------------------------------------------------------


def _study_attrs(conn: sa.Connection, study_ids: Sequence[int] | None, keys: Iterable[str]) -> dict[int, dict]:
    query = sa.select(STUDY_ATTRS.c.study_id, STUDY_ATTRS.c.key, STUDY_ATTRS.c.value_json).where(
        STUDY_ATTRS.c.key.in_(list(keys)))
    if study_ids is not None:
        query = query.where(STUDY_ATTRS.c.study_id.in_(list(study_ids)))
    out: dict[int, dict] = {}
    for study_id, key, value in conn.execute(query):
        out.setdefault(study_id, {})[key] = _json(value)
    return out


def _status_counts(conn: sa.Connection, study_ids: Sequence[int] | None) -> dict[int, dict[str, int]]:
    """Trials per NNI status per study (superseded asks excluded: only indexed trials count)."""
    status = TRIAL_ATTRS.alias("st")
    query = (sa.select(TRIALS.c.study_id, status.c.value_json, sa.func.count())
             .select_from(TRIALS.join(TRIAL_INDEX, TRIAL_INDEX.c.trial_id == TRIALS.c.trial_id)
                          .outerjoin(status, sa.and_(status.c.trial_id == TRIALS.c.trial_id,
                                                     status.c.key == "nni_status")))
             .group_by(TRIALS.c.study_id, status.c.value_json))
    if study_ids is not None:  # through the index table's key: SQLite plans it well only that way
        query = query.where(TRIAL_INDEX.c.study_id.in_(list(study_ids)))
    out: dict[int, dict[str, int]] = {}
    for study_id, value, count in conn.execute(query):
        name = _json(value) or "WAITING"
        out.setdefault(study_id, {})[name] = out.get(study_id, {}).get(name, 0) + count
    return out


def _times_and_best(conn: sa.Connection, study_ids: Sequence[int] | None) -> dict[int, dict[str, Any]]:
    query = (sa.select(TRIALS.c.study_id, sa.func.min(TRIALS.c.datetime_start), sa.func.max(TRIALS.c.datetime_complete),
                       sa.func.min(VALUES.c.value), sa.func.max(VALUES.c.value))
             .select_from(TRIALS.join(TRIAL_INDEX, TRIAL_INDEX.c.trial_id == TRIALS.c.trial_id)
                          .outerjoin(VALUES, sa.and_(VALUES.c.trial_id == TRIALS.c.trial_id, VALUES.c.objective == 0,
                                                     sa.cast(TRIALS.c.state, sa.String(8)) == "COMPLETE")))
             .group_by(TRIALS.c.study_id))
    if study_ids is not None:
        query = query.where(TRIAL_INDEX.c.study_id.in_(list(study_ids)))
    return {row[0]: {"started": _epoch(row[1]), "ended": _epoch(row[2]), "min": row[3], "max": row[4]}
            for row in conn.execute(query)}


_LIST_ATTRS = ("experiment_name", "dag_id", "run_id", "platform", "optimize_mode", "config")


@dataclass(frozen=True)
class ExperimentRow:
    experiment_id: str
    name: str | None
    dag_id: str | None
    run_id: str | None
    platform: str | None
    tuner: str | None
    optimize_mode: str
    counts: dict[str, int]
    trials: int
    best: float | None
    started: float | None
    ended: float | None
    max_trial_number: int | None
    active: bool

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _algorithm_name(config: dict[str, Any] | None) -> str | None:
    for key in ("tuner", "advisor"):
        algorithm = (config or {}).get(key)
        if isinstance(algorithm, dict):
            return algorithm.get("name") or algorithm.get("className")
    return None


def list_experiments(engine: Engine) -> list[ExperimentRow]:
    """Every experiment in the store (running, finished, or of a DAG that no longer exists)."""
    with engine.connect() as conn:
        studies = {sid: name for sid, name in conn.execute(sa.select(STUDIES.c.study_id, STUDIES.c.study_name))}
        attrs = _study_attrs(conn, None, _LIST_ATTRS)
        counts = _status_counts(conn, None)
        times = _times_and_best(conn, None)
    rows = []
    for sid, name in studies.items():
        a = attrs.get(sid, {})
        if "dag_id" not in a and "config" not in a:
            continue  # not a trialflow experiment (another Optuna study in the same database)
        config = a.get("config") or {}
        mode = a.get("optimize_mode") or "maximize"
        t = times.get(sid, {})
        c = counts.get(sid, {})
        rows.append(ExperimentRow(
            experiment_id=name, name=a.get("experiment_name"), dag_id=a.get("dag_id"), run_id=a.get("run_id"),
            platform=a.get("platform"), tuner=_algorithm_name(config), optimize_mode=mode, counts=c,
            trials=sum(c.values()), best=_finite(t.get("min") if mode == "minimize" else t.get("max")),
            started=t.get("started"), ended=t.get("ended"), max_trial_number=config.get("maxTrialNumber"),
            active=any(c.get(s) for s in ACTIVE)))
    return sorted(rows, key=lambda r: r.started or 0, reverse=True)


def study_id_of(conn: sa.Connection, experiment_id: str) -> int:
    found = conn.execute(sa.select(STUDIES.c.study_id).where(STUDIES.c.study_name == experiment_id)).scalar()
    if found is None:
        raise UnknownExperiment(experiment_id)
    return int(found)


def experiment_dag_id(engine: Engine, experiment_id: str) -> str | None:
    """The DAG an experiment belongs to (for access checks: one indexed lookup)."""
    with engine.connect() as conn:
        sid = study_id_of(conn, experiment_id)
        return _json(conn.execute(sa.select(STUDY_ATTRS.c.value_json).where(
            STUDY_ATTRS.c.study_id == sid, STUDY_ATTRS.c.key == "dag_id")).scalar())


def experiment_summary(engine: Engine, experiment_id: str) -> dict[str, Any]:
    """The experiment page's header: config essentials, counts, best trial, time and trial budgets."""
    with engine.connect() as conn:
        sid = study_id_of(conn, experiment_id)
        attrs = {k: v for k, v in _study_attrs(conn, [sid], _LIST_ATTRS + ("directory",)).get(sid, {}).items()}
        runs = conn.execute(sa.select(STUDY_ATTRS.c.key, STUDY_ATTRS.c.value_json).where(
            STUDY_ATTRS.c.study_id == sid, STUDY_ATTRS.c.key.like("run:%"))).all()
        counts = _status_counts(conn, [sid]).get(sid, {})
        times = _times_and_best(conn, [sid]).get(sid, {})
    config = attrs.get("config") or {}
    mode = attrs.get("optimize_mode") or "maximize"
    best_value = _finite(times.get("min") if mode == "minimize" else times.get("max"))
    best = None
    if best_value is not None:
        page = trials_page(engine, experiment_id, sort="metric", descending=mode != "minimize", limit=1,
                           statuses=["SUCCEEDED"])
        best = page["rows"][0] if page["rows"] else None
    windows = [dict(_json(value) or {}, run_id=key[len("run:"):]) for key, value in runs]
    deadline = max((w.get("deadline") or 0 for w in windows), default=0) or None
    service = config.get("trainingService")
    services = service if isinstance(service, list) else [service] if service else []
    return {
        "experiment_id": experiment_id, "name": attrs.get("experiment_name"), "dag_id": attrs.get("dag_id"),
        "run_id": attrs.get("run_id"), "platform": attrs.get("platform"), "optimize_mode": mode,
        "directory": attrs.get("directory"), "counts": counts, "trials": sum(counts.values()),
        "active": any(counts.get(s) for s in ACTIVE), "best": best,
        "started": times.get("started"), "ended": times.get("ended"), "deadline": deadline,
        "runs": sorted(windows, key=lambda w: w.get("first_index", 0)),
        "config": {
            "tuner": config.get("tuner") or config.get("advisor"), "assessor": config.get("assessor"),
            "trialConcurrency": config.get("trialConcurrency"), "maxTrialNumber": config.get("maxTrialNumber"),
            "maxExperimentDuration": config.get("maxExperimentDuration"),
            "maxTrialDuration": config.get("maxTrialDuration"), "trialCommand": config.get("trialCommand"),
            "platforms": [s.get("platform") for s in services if isinstance(s, dict)],
            "searchSpace": config.get("searchSpace"),
        },
    }


# -- trials --------------------------------------------------------------------------------


def _attr(name: str) -> sa.Alias:
    return TRIAL_ATTRS.alias(f"a_{name}")


def _json_field(engine: Engine, column: sa.ColumnElement, key: str) -> tuple[sa.ColumnElement, sa.ColumnElement]:
    """(numeric, text) expressions for ``column``'s JSON object member ``key``, for sorting by a
    parameter; the key is a bound value, never SQL."""
    if _dialect(engine) == "postgresql":
        from sqlalchemy.dialects import postgresql

        document = sa.cast(column, postgresql.JSON)
        text = document[key].as_string()
        numeric = sa.case((sa.func.json_typeof(document[key]) == "number", sa.cast(text, sa.Float)), else_=None)
        return numeric, text
    path = "$." + json.dumps(key)  # $."name": any characters, quoted by json.dumps
    extracted = sa.func.json_extract(column, sa.bindparam(None, path, type_=sa.String))
    numeric = sa.case((sa.func.json_type(column, sa.bindparam(None, path, type_=sa.String)).in_(["integer", "real"]),
                       extracted), else_=None)
    return numeric, sa.cast(extracted, sa.Text)


def _duration(engine: Engine) -> sa.ColumnElement:
    end = sa.func.coalesce(TRIALS.c.datetime_complete, sa.func.current_timestamp())
    if _dialect(engine) == "postgresql":
        return sa.extract("epoch", end - TRIALS.c.datetime_start)
    return (sa.func.julianday(TRIALS.c.datetime_complete) - sa.func.julianday(TRIALS.c.datetime_start)) * 86400.0


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _row(raw: sa.Row, index_offset: int = 0) -> dict[str, Any]:
    handle = _json(raw.a_handle) or {}
    final = _json(raw.a_final_metric)
    started, ended = _epoch(raw.datetime_start), _epoch(raw.datetime_complete)
    return {
        "trial_index": raw.trial_index, "trial_id": _json(raw.a_trial_id), "status": _json(raw.a_nni_status) or "WAITING",
        "parameters": _json(raw.a_parameters) or {}, "final": final, "metric": _finite(raw.value),
        "message": _json(raw.a_message), "platform": handle.get("platform"), "host": handle.get("host"),
        "started": started, "ended": ended,
        "duration": None if started is None else ((ended or time.time()) - started),
        "intermediate_count": raw.intermediate_count, "optuna_state": raw.state,
    }


def _trials_query(engine: Engine, sid: int) -> tuple[sa.Select, dict[str, sa.Alias]]:
    attrs = {name: _attr(name) for name in ROW_ATTRS}
    counts = (sa.select(INTERMEDIATE.c.trial_id, sa.func.count().label("n"))
              .group_by(INTERMEDIATE.c.trial_id).subquery("ic"))
    joined = TRIALS.join(TRIAL_INDEX, TRIAL_INDEX.c.trial_id == TRIALS.c.trial_id).outerjoin(
        VALUES, sa.and_(VALUES.c.trial_id == TRIALS.c.trial_id, VALUES.c.objective == 0)).outerjoin(
        counts, counts.c.trial_id == TRIALS.c.trial_id)
    for name, alias in attrs.items():
        joined = joined.outerjoin(alias, sa.and_(alias.c.trial_id == TRIALS.c.trial_id, alias.c.key == name))
    columns = [TRIAL_INDEX.c.trial_index, TRIALS.c.trial_id.label("storage_id"),
               sa.cast(TRIALS.c.state, sa.String(8)).label("state"),
               TRIALS.c.datetime_start, TRIALS.c.datetime_complete, VALUES.c.value,
               sa.func.coalesce(counts.c.n, 0).label("intermediate_count")]
    columns += [alias.c.value_json.label(f"a_{name}") for name, alias in attrs.items()]
    return sa.select(*columns).select_from(joined).where(TRIAL_INDEX.c.study_id == sid), attrs


def trials_page(engine: Engine, experiment_id: str, *, statuses: Sequence[str] | None = None, search: str = "",
                sort: SortKey = "index", descending: bool = False, offset: int = 0, limit: int = 50,
                indexes: Sequence[int] | None = None) -> dict[str, Any]:
    """One page of the trial table: filtered by status and text, sorted by any column (a
    parameter too), paginated; ``total`` counts every trial that matches."""
    limit = max(1, min(int(limit), MAX_PAGE))
    offset = max(0, int(offset))
    with engine.connect() as conn:
        sid = study_id_of(conn, experiment_id)
        query, attrs = _trials_query(engine, sid)
        if statuses:
            wanted = [json.dumps(s) for s in statuses if s in STATUSES]
            status_col = attrs["nni_status"].c.value_json
            condition = status_col.in_(wanted)
            if "WAITING" in statuses:
                condition = sa.or_(condition, status_col.is_(None))
            query = query.where(condition)
        if indexes is not None:
            query = query.where(TRIAL_INDEX.c.trial_index.in_([int(i) for i in indexes]))
        if search:
            pattern = f"%{_escape_like(search)}%"
            query = query.where(sa.or_(*(attrs[name].c.value_json.like(pattern, escape="\\")
                                         for name in ("trial_id", "parameters", "message", "nni_status"))))
        order: list[sa.ColumnElement] = []
        if sort == "status":
            order.append(attrs["nni_status"].c.value_json)
        elif sort == "metric":
            order.append(VALUES.c.value)
        elif sort == "duration":
            order.append(_duration(engine))
        elif sort == "platform":
            order.append(attrs["service_index"].c.value_json)
        elif sort.startswith("param:"):
            numeric, text = _json_field(engine, attrs["parameters"].c.value_json, sort[len("param:"):])
            order += [numeric, text]
        order = [(o.desc() if descending else o.asc()).nulls_last() for o in order]
        order.append(TRIAL_INDEX.c.trial_index.desc() if descending and sort == "index" else TRIAL_INDEX.c.trial_index)
        total = conn.execute(sa.select(sa.func.count()).select_from(query.subquery())).scalar() or 0
        rows = conn.execute(query.order_by(*order).offset(offset).limit(limit)).all()
    return {"total": int(total), "offset": offset, "limit": limit, "rows": [_row(r) for r in rows]}


def chart_data(engine: Engine, experiment_id: str) -> list[dict[str, Any]]:
    """Every trial's index, status, parameters, metric and times: optimisation history, parallel
    coordinates and timeline (2,000 trials are ~400 KB of JSON). One lean query: no counts, no
    pagination."""
    status, params, handle = _attr("nni_status"), _attr("parameters"), _attr("handle")
    with engine.connect() as conn:
        sid = study_id_of(conn, experiment_id)
        query = (sa.select(TRIAL_INDEX.c.trial_index, VALUES.c.value, TRIALS.c.datetime_start,
                           TRIALS.c.datetime_complete, status.c.value_json, params.c.value_json, handle.c.value_json)
                 .select_from(TRIAL_INDEX.join(TRIALS, TRIALS.c.trial_id == TRIAL_INDEX.c.trial_id)
                              .outerjoin(VALUES, sa.and_(VALUES.c.trial_id == TRIALS.c.trial_id, VALUES.c.objective == 0))
                              .outerjoin(status, sa.and_(status.c.trial_id == TRIALS.c.trial_id,
                                                         status.c.key == "nni_status"))
                              .outerjoin(params, sa.and_(params.c.trial_id == TRIALS.c.trial_id,
                                                         params.c.key == "parameters"))
                              .outerjoin(handle, sa.and_(handle.c.trial_id == TRIALS.c.trial_id,
                                                         handle.c.key == "handle")))
                 .where(TRIAL_INDEX.c.study_id == sid).order_by(TRIAL_INDEX.c.trial_index))
        rows = conn.execute(query).all()
    return [{"trial_index": index, "status": _json(st) or "WAITING", "parameters": _json(pa) or {},
             "metric": _finite(value), "started": _epoch(begun), "ended": _epoch(done),
             "platform": (_json(ha) or {}).get("platform")}
            for index, value, begun, done, st, pa, ha in rows]


def trial_detail(engine: Engine, experiment_id: str, trial_index: int) -> dict[str, Any]:
    page = trials_page(engine, experiment_id, indexes=[trial_index], limit=1)
    if not page["rows"]:
        raise UnknownExperiment(f"{experiment_id} trial {trial_index}")
    row = page["rows"][0]
    with engine.connect() as conn:
        sid = study_id_of(conn, experiment_id)
        storage_id = conn.execute(sa.select(TRIAL_INDEX.c.trial_id).where(
            TRIAL_INDEX.c.study_id == sid, TRIAL_INDEX.c.trial_index == trial_index)).scalar()
        handle = _json(conn.execute(sa.select(TRIAL_ATTRS.c.value_json).where(
            TRIAL_ATTRS.c.trial_id == storage_id, TRIAL_ATTRS.c.key == "handle")).scalar())
        extra = _json(conn.execute(sa.select(TRIAL_ATTRS.c.value_json).where(
            TRIAL_ATTRS.c.trial_id == storage_id, TRIAL_ATTRS.c.key == "final_metric_extra")).scalar())
        points = conn.execute(sa.select(INTERMEDIATE.c.step, INTERMEDIATE.c.intermediate_value).where(
            INTERMEDIATE.c.trial_id == storage_id).order_by(INTERMEDIATE.c.step)).all()
    return {**row, "handle": handle or {}, "final_extra": extra or {},
            "intermediate": [[step, _finite(value)] for step, value in points]}


def curves(engine: Engine, experiment_id: str, indexes: Sequence[int] | None = None, *, top: int = 20,
           max_points: int = 200) -> dict[str, Any]:
    """Intermediate results per trial: the given trials, or the ``top`` best finished ones plus
    the running ones; each curve thinned to at most ``max_points`` (evenly, last point kept)."""
    with engine.connect() as conn:
        sid = study_id_of(conn, experiment_id)
    status = _attr("nni_status")
    base = (sa.select(TRIAL_INDEX.c.trial_index, status.c.value_json)
            .select_from(TRIAL_INDEX.join(TRIALS, TRIALS.c.trial_id == TRIAL_INDEX.c.trial_id)
                         .outerjoin(VALUES, sa.and_(VALUES.c.trial_id == TRIALS.c.trial_id, VALUES.c.objective == 0))
                         .outerjoin(status, sa.and_(status.c.trial_id == TRIALS.c.trial_id,
                                                    status.c.key == "nni_status")))
            .where(TRIAL_INDEX.c.study_id == sid))
    with engine.connect() as conn:
        if indexes is None:
            minimize = experiment_summary_mode(engine, experiment_id) == "minimize"
            best = conn.execute(base.where(status.c.value_json == json.dumps("SUCCEEDED"), VALUES.c.value.is_not(None))
                                .order_by(VALUES.c.value.asc() if minimize else VALUES.c.value.desc())
                                .limit(top)).all()
            others = conn.execute(base.where(status.c.value_json.in_([json.dumps(s) for s in ACTIVE]
                                                                     + [json.dumps("EARLY_STOPPED")]))
                                  .order_by(TRIAL_INDEX.c.trial_index.desc()).limit(top)).all()
            picked = best + others
        else:
            picked = conn.execute(base.where(TRIAL_INDEX.c.trial_index.in_([int(i) for i in indexes][:50]))).all()
    chosen = {index: _json(st) or "WAITING" for index, st in picked}
    if not chosen:
        return {"curves": []}
    with engine.connect() as conn:
        ids = dict(conn.execute(sa.select(TRIAL_INDEX.c.trial_id, TRIAL_INDEX.c.trial_index).where(
            TRIAL_INDEX.c.study_id == sid, TRIAL_INDEX.c.trial_index.in_(list(chosen)))).all())
        points: dict[int, list] = {}
        for trial_id, step, value in conn.execute(
                sa.select(INTERMEDIATE.c.trial_id, INTERMEDIATE.c.step, INTERMEDIATE.c.intermediate_value)
                .where(INTERMEDIATE.c.trial_id.in_(list(ids))).order_by(INTERMEDIATE.c.trial_id, INTERMEDIATE.c.step)):
            points.setdefault(ids[trial_id], []).append([step, _finite(value)])
    out = []
    for index, status_name in sorted(chosen.items()):
        series = points.get(index, [])
        if len(series) > max_points:
            stride = len(series) / max_points
            series = [series[int(i * stride)] for i in range(max_points - 1)] + [series[-1]]
        out.append({"trial_index": index, "status": status_name, "points": series})
    return {"curves": out}


# -- importance ----------------------------------------------------------------------------


def flatten_parameters(parameters: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """NNI parameters as flat columns: a nested choice's ``_name`` under its key, its own
    parameters as ``key/sub``."""
    flat: dict[str, Any] = {}
    for key, value in (parameters or {}).items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and "_name" in value:
            flat[name] = value["_name"]
            flat.update(flatten_parameters({k: v for k, v in value.items() if k != "_name"}, name + "/"))
        elif isinstance(value, (dict, list)):
            flat[name] = json.dumps(value, sort_keys=True)
        else:
            flat[name] = value
    return flat


_importance_cache: dict[tuple[str, str, int], dict[str, Any]] = {}


def importance(engine: Engine, experiment_id: str) -> dict[str, Any]:
    """Parameter importance of the finished trials (Optuna's PED-ANOVA evaluator, which needs no
    extra library), over the NNI parameters flattened; cached per count of finished trials."""
    with engine.connect() as conn:
        sid = study_id_of(conn, experiment_id)
        finished = conn.execute(sa.select(sa.func.count()).select_from(
            TRIAL_INDEX.join(VALUES, VALUES.c.trial_id == TRIAL_INDEX.c.trial_id)).where(
            TRIAL_INDEX.c.study_id == sid)).scalar()
    key = (str(engine.url), experiment_id, int(finished or 0))
    if key in _importance_cache:
        return _importance_cache[key]
    rows = [r for r in chart_data(engine, experiment_id) if r["status"] == "SUCCEEDED" and r["metric"] is not None]
    result = {"importances": {}, "trials": len(rows), "evaluator": "PED-ANOVA", "note": None}
    if len(rows) < 4:
        result["note"] = "needs at least 4 succeeded trials"
        return result
    import optuna
    from optuna.distributions import CategoricalDistribution, FloatDistribution

    flat = [flatten_parameters(r["parameters"]) for r in rows]
    names = sorted({k for f in flat for k in f})
    distributions: dict[str, Any] = {}
    for name in names:
        values = [f[name] for f in flat if f.get(name) is not None]  # conditional parameters: where set
        numbers = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if numbers and len(numbers) == len(values):
            if min(numbers) < max(numbers):
                distributions[name] = FloatDistribution(float(min(numbers)), float(max(numbers)))
        else:
            choices = sorted({json.dumps(v) for v in values})
            if len(choices) > 1:
                distributions[name] = CategoricalDistribution(choices)
    if not distributions:
        result["note"] = "every parameter has a single value"
        return result
    mode = experiment_summary_mode(engine, experiment_id)
    study = optuna.create_study(direction=mode)
    for f, r in zip(flat, rows):
        params = {n: (float(f[n]) if isinstance(distributions[n], FloatDistribution) else json.dumps(f[n]))
                  for n in distributions if f.get(n) is not None}
        dists = {n: distributions[n] for n in params}
        study.add_trial(optuna.trial.create_trial(params=params, distributions=dists, value=r["metric"]))
    try:
        values = optuna.importance.get_param_importances(
            study, evaluator=optuna.importance.PedAnovaImportanceEvaluator(), normalize=True)
        result["importances"] = {k: float(v) for k, v in values.items()}
    except (ValueError, RuntimeError) as exc:
        result["note"] = f"importance could not be computed: {exc}"
    _importance_cache[key] = result
    return result


def experiment_summary_mode(engine: Engine, experiment_id: str) -> Literal["maximize", "minimize"]:
    with engine.connect() as conn:
        sid = study_id_of(conn, experiment_id)
        mode = _json(conn.execute(sa.select(STUDY_ATTRS.c.value_json).where(
            STUDY_ATTRS.c.study_id == sid, STUDY_ATTRS.c.key == "optimize_mode")).scalar())
    return "minimize" if mode == "minimize" else "maximize"


# -- export --------------------------------------------------------------------------------

_DANGEROUS_START = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_safe(value: Any) -> Any:
    """A text cell a spreadsheet would run as a formula gets a leading apostrophe (OWASP's CSV
    injection advice); numbers stay numbers."""
    if isinstance(value, str) and value.startswith(_DANGEROUS_START):
        return "'" + value
    return value


def export_rows(engine: Engine, experiment_id: str) -> tuple[list[str], list[dict[str, Any]]]:
    """(columns, rows) of every trial, parameters flattened into columns."""
    rows = []
    offset, total = 0, 1
    while offset < total:
        page = trials_page(engine, experiment_id, limit=MAX_PAGE, offset=offset)
        total = page["total"]
        rows += page["rows"]
        offset += MAX_PAGE
    flat = [flatten_parameters(r["parameters"]) for r in rows]
    params = sorted({k for f in flat for k in f})
    columns = ["trial_index", "trial_id", "status", "metric", "final", "duration_s", "platform", "host",
               "intermediate_count", "message"] + [f"param:{p}" for p in params]
    out = []
    for r, f in zip(rows, flat):
        record = {"trial_index": r["trial_index"], "trial_id": r["trial_id"], "status": r["status"],
                  "metric": r["metric"], "final": r["final"] if not isinstance(r["final"], (dict, list))
                  else json.dumps(r["final"], sort_keys=True),
                  "duration_s": None if r["duration"] is None else round(r["duration"], 3),
                  "platform": r["platform"], "host": r["host"], "intermediate_count": r["intermediate_count"],
                  "message": r["message"]}
        record.update({f"param:{p}": f.get(p) for p in params})
        out.append(record)
    return columns, out


def export_csv(engine: Engine, experiment_id: str) -> str:
    import csv
    import io

    columns, rows = export_rows(engine, experiment_id)
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: spreadsheet_safe(v) for k, v in row.items()})
    return buffer.getvalue()


def export_json(engine: Engine, experiment_id: str) -> list[dict[str, Any]]:
    """Trials as JSON, parameters in NNI's shape (text cells made safe, as for CSV: the file is
    as likely to be opened in a spreadsheet)."""
    rows = []
    offset, total = 0, 1
    while offset < total:
        page = trials_page(engine, experiment_id, limit=MAX_PAGE, offset=offset)
        total = page["total"]
        rows += page["rows"]
        offset += MAX_PAGE
    return [_safe_deep(r) for r in rows]


def _safe_deep(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _safe_deep(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_safe_deep(v) for v in value]
    return spreadsheet_safe(value)

"""The trial table (filter, sort by any column, paginate: in the database, or from the kept
trials when searched or sorted by a parameter), chart data, one trial's detail and the
intermediate-result curves."""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.sql.selectable import NamedFromClause

from trialflow.config.units import whole_number
from trialflow.queries.kept_table import SEARCHED, table_page
from trialflow.queries.objectives import Objectives, objectives_of
from trialflow.queries.settled import study_trials
from trialflow.queries.tables import (
    ACTIVE,
    INTERMEDIATE,
    MAX_PAGE,
    ROW_ATTRS,
    STATUSES,
    TRIAL_ATTRS,
    TRIAL_INDEX,
    TRIALS,
    VALUES,
    UnknownExperiment,
    decoded,
    dialect_of,
    epoch,
    finite,
    optimize_mode,
    storage_id_of,
    study_attrs,
    study_id_of,
)
from trialflow.queries.tracking import run_links
from trialflow.seeding.nni_import import IMPORT_REQUESTER
from trialflow.store.records import Lineage, restarts_from_attr
from trialflow.trial.status import COUNTED_STATUS_NAMES
from trialflow.tuning.space_versions import SPACES_ATTR, VERSION_ATTR
from trialflow.tuning.space_versions import newest as newest_version

SortKey = str  # "index" | "status" | "metric" | "duration" | "platform" | "param:<name>" | "objective:<n>"


def _attr(name: str) -> NamedFromClause:
    return TRIAL_ATTRS.alias(f"a_{name}")


def _duration(engine: Engine) -> sa.ColumnElement:
    """Seconds the trial ran: to now while it runs; none (unknown) for an ended trial whose end
    or start was not recorded (an NNI job imported without them), never "until now"."""
    running = sa.cast(TRIALS.c.state, sa.String(8)) == "RUNNING"
    end = sa.case(
        (running, sa.func.coalesce(TRIALS.c.datetime_complete, sa.func.current_timestamp())),
        else_=TRIALS.c.datetime_complete,
    )
    if dialect_of(engine) == "postgresql":
        return sa.extract("epoch", end - TRIALS.c.datetime_start)
    return (sa.func.julianday(TRIALS.c.datetime_complete) - sa.func.julianday(TRIALS.c.datetime_start)) * 86400.0


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def newest_space(conn: sa.Connection, sid: int) -> int:
    """The experiment's newest search space version: 0 until a person changes the space while
    it runs (trialflow.tuning.space_versions keeps each change)."""
    return newest_version(study_attrs(conn, [sid], (SPACES_ATTR,)).get(sid, {}).get(SPACES_ATTR))


def _row(raw: sa.Row, intermediate_count: int = 0, newest: int = 0) -> dict[str, Any]:
    handle = decoded(raw.a_handle) or {}
    space_version = _version(raw.a_space_version)
    final = decoded(raw.a_final_metric)
    asked_by = decoded(raw.a_asked_by)
    started, ended = epoch(raw.datetime_start), epoch(raw.datetime_complete)
    imported = isinstance(asked_by, dict) and asked_by.get("by") == IMPORT_REQUESTER
    running = str(getattr(raw.state, "name", raw.state)).endswith("RUNNING")
    return {
        "trial_index": raw.trial_index,
        "trial_id": decoded(raw.a_trial_id),
        "status": decoded(raw.a_nni_status) or "WAITING",
        "parameters": decoded(raw.a_parameters) or {},
        # NNI's parameter.cfg word: a person chose them (added trial, re-run) or the tuner did;
        # an imported trial's is NNI's own (its tuner chose them, unless NNI's user did)
        "parameter_source": _source(asked_by, imported),
        "added_by": asked_by.get("by") if isinstance(asked_by, dict) and not imported else None,
        "imported": imported,
        "final": final,
        "metric": finite(raw.value),
        "message": decoded(raw.a_message),
        "platform": handle.get("platform"),
        "host": handle.get("host"),
        "started": started,
        "ended": ended,
        # unknown (None) where a time was not recorded: an ended trial never runs "until now"
        "duration": None if started is None or (ended is None and not running) else (ended or time.time()) - started,
        "intermediate_count": intermediate_count,
        "optuna_state": raw.state,
        # asked under an earlier search space than the newest: kept in the history and the
        # charts, marked, and given to the tuner only where it fits the newest
        "space_version": space_version,
        "earlier_space": space_version < newest,
    }


def _source(asked_by: Any, imported: bool) -> str:
    if imported:
        return "customized" if asked_by.get("parameter_source") == "customized" else "algorithm"
    return "customized" if asked_by else "algorithm"


def intermediate_counts(conn: sa.Connection, storage_ids: Sequence[int]) -> dict[int, int]:
    """Intermediate results per trial, for one page's trials only: counted over the whole table
    (a join in the page query), it was a scan of every result of every experiment per page
    (3,000,000 rows at 20,000 trials: ~200 ms of each call)."""
    if not storage_ids:
        return {}
    query = (
        sa.select(INTERMEDIATE.c.trial_id, sa.func.count())
        .where(INTERMEDIATE.c.trial_id.in_(list(storage_ids)))
        .group_by(INTERMEDIATE.c.trial_id)
    )
    return {trial_id: int(n) for trial_id, n in conn.execute(query)}


def _trials_query(engine: Engine, sid: int) -> tuple[sa.Select, dict[str, NamedFromClause]]:
    attrs = {name: _attr(name) for name in ROW_ATTRS}
    joined = TRIALS.join(TRIAL_INDEX, TRIAL_INDEX.c.trial_id == TRIALS.c.trial_id).outerjoin(
        VALUES, sa.and_(VALUES.c.trial_id == TRIALS.c.trial_id, VALUES.c.objective == 0)
    )
    for name, alias in attrs.items():
        joined = joined.outerjoin(alias, sa.and_(alias.c.trial_id == TRIALS.c.trial_id, alias.c.key == name))
    columns = [
        TRIAL_INDEX.c.trial_index,
        TRIALS.c.trial_id.label("storage_id"),
        sa.cast(TRIALS.c.state, sa.String(8)).label("state"),
        TRIALS.c.datetime_start,
        TRIALS.c.datetime_complete,
        VALUES.c.value,
    ]
    columns += [alias.c.value_json.label(f"a_{name}") for name, alias in attrs.items()]
    return sa.select(*columns).select_from(joined).where(TRIAL_INDEX.c.study_id == sid), attrs


def _with_attrs(attrs: dict[str, NamedFromClause]) -> sa.FromClause:
    """The trial index with each named attribute's row joined (absent: NULL)."""
    joined: sa.FromClause = TRIAL_INDEX
    for name, alias in attrs.items():
        joined = joined.outerjoin(alias, sa.and_(alias.c.trial_id == TRIAL_INDEX.c.trial_id, alias.c.key == name))
    return joined


def trials_page(
    engine: Engine,
    experiment_id: str,
    *,
    statuses: Sequence[str] | None = None,
    search: str = "",
    sort: SortKey = "index",
    descending: bool = False,
    offset: int = 0,
    limit: int = 50,
    indexes: Sequence[int] | None = None,
) -> dict[str, Any]:
    """One page of the trial table: filtered by status and text, sorted by any column (a
    parameter too), paginated; ``total`` counts every trial that matches.

    Two steps, as a deferred join: the page's trials are found joining only what the filter and
    the sort read (at 100,000 trials, joining a row's nine attributes to every trial before
    sorting or counting cost ~0.4-1 s a page), then only those rows are read whole. A search
    (sorted by index or a parameter) and a sort by a parameter find the page among the trials
    this process keeps (trialflow.queries.kept_table), which read every trial's JSON in SQL."""
    limit = max(1, min(int(limit), MAX_PAGE))
    offset = max(0, int(offset))
    attrs: dict[str, NamedFromClause] = {}

    def attr(name: str) -> NamedFromClause:
        if name not in attrs:
            attrs[name] = _attr(name)
        return attrs[name]

    kept_sort = sort == "index" or sort.startswith("param:")
    if kept_sort and (search or sort != "index"):
        return _kept_page(engine, experiment_id, statuses, search, sort, descending, offset, limit, indexes)
    with engine.connect() as conn:
        sid = study_id_of(conn, experiment_id)
        conditions: list[sa.ColumnElement[bool]] = [TRIAL_INDEX.c.study_id == sid]
        if statuses:
            wanted = [json.dumps(s) for s in statuses if s in STATUSES]
            status_col = attr("nni_status").c.value_json
            condition: sa.ColumnElement[bool] = status_col.in_(wanted)
            if "WAITING" in statuses:
                condition = sa.or_(condition, status_col.is_(None))
            conditions.append(condition)
        if indexes is not None:
            conditions.append(TRIAL_INDEX.c.trial_index.in_([int(i) for i in indexes]))
        if search:
            # Stored text is JSON: 'ünï' is written \u00fc..., 'x"y' is x\"y, and a lone backslash
            # would match every escape. Search what the person sees, in the form the store holds it.
            # Any ASCII case on every database, as kept_table matches (PostgreSQL's LIKE is not).
            pattern = f"%{_escape_like(json.dumps(search)[1:-1])}%"
            conditions.append(sa.or_(*(attr(name).c.value_json.ilike(pattern, escape="\\") for name in SEARCHED)))
        total = (
            conn.execute(sa.select(sa.func.count()).select_from(_with_attrs(attrs)).where(*conditions)).scalar() or 0
        )

        order: list[sa.ColumnElement] = []
        objective = whole_number(sort[len("objective:") :]) if sort.startswith("objective:") else None
        chosen = VALUES.alias("sort_value")  # several objectives: Optuna's value row of that objective
        if sort == "status":
            order.append(attr("nni_status").c.value_json)
        elif sort == "metric":
            order.append(VALUES.c.value)
        elif sort == "duration":
            order.append(_duration(engine))
        elif sort == "platform":
            order.append(attr("service_index").c.value_json)
        elif objective is not None:  # the first objective is "metric"
            order.append(chosen.c.value)
        order = [(o.desc() if descending else o.asc()).nulls_last() for o in order]
        order.append(TRIAL_INDEX.c.trial_index.desc() if descending and sort == "index" else TRIAL_INDEX.c.trial_index)
        keyed = _with_attrs(attrs)  # the filter's attributes and the sort's
        if sort == "metric":
            keyed = keyed.outerjoin(
                VALUES, sa.and_(VALUES.c.trial_id == TRIAL_INDEX.c.trial_id, VALUES.c.objective == 0)
            )
        elif sort == "duration":
            keyed = keyed.join(TRIALS, TRIALS.c.trial_id == TRIAL_INDEX.c.trial_id)
        elif objective is not None:
            keyed = keyed.outerjoin(
                chosen, sa.and_(chosen.c.trial_id == TRIAL_INDEX.c.trial_id, chosen.c.objective == objective)
            )
        page_ids = (
            conn.execute(
                sa.select(TRIAL_INDEX.c.trial_id)
                .select_from(keyed)
                .where(*conditions)
                .order_by(*order)
                .offset(offset)
                .limit(limit)
            )
            .scalars()
            .all()
        )
        full, _ = _trials_query(engine, sid)
        found = {r.storage_id: r for r in conn.execute(full.where(TRIAL_INDEX.c.trial_id.in_(page_ids)))}
        rows = [found[i] for i in page_ids if i in found]
        counts = intermediate_counts(conn, [r.storage_id for r in rows])
    return _page(engine, experiment_id, rows, counts, int(total), offset, limit)


def _kept_page(
    engine: Engine,
    experiment_id: str,
    statuses: Sequence[str] | None,
    search: str,
    sort: SortKey,
    descending: bool,
    offset: int,
    limit: int,
    indexes: Sequence[int] | None,
) -> dict[str, Any]:
    """trials_page searched or sorted by a parameter: from the trials kept in memory
    (trialflow.queries.kept_table), then the page's rows read whole."""
    with engine.connect() as conn:
        sid = study_id_of(conn, experiment_id)
    study = study_trials(engine, [sid], time.time())[sid]
    found = table_page(
        engine,
        sid,
        study,
        statuses=statuses,
        indexes=None if indexes is None else [int(i) for i in indexes],
        search=search,
        sort_parameter=sort[len("param:") :] if sort.startswith("param:") else None,
        descending=descending,
        offset=offset,
        limit=limit,
    )
    with engine.connect() as conn:
        full, _ = _trials_query(engine, sid)
        read = {r.trial_index: r for r in conn.execute(full.where(TRIAL_INDEX.c.trial_index.in_(found.indexes)))}
        rows = [read[i] for i in found.indexes if i in read]
        counts = intermediate_counts(conn, [r.storage_id for r in rows])
    return _page(engine, experiment_id, rows, counts, found.total, offset, limit)


def _page(
    engine: Engine, experiment_id: str, rows: list[sa.Row], counts: dict[int, int], total: int, offset: int, limit: int
) -> dict[str, Any]:
    several = objectives_of(engine, experiment_id)  # several objectives: each row's values, the set
    with engine.connect() as conn:  # each trial's MLflow run, where the experiment is tracked
        sid = study_id_of(conn, experiment_id)
        newest = newest_space(conn, sid)
        made = [_row(r, counts.get(r.storage_id, 0), newest) for r in rows]
        links = run_links(conn, sid, (str(m["trial_index"]) for m in made))
    for one in made:
        one["mlflow_url"] = links.get(str(one["trial_index"]))
    return {
        "total": total,
        "offset": offset,
        "limit": limit,
        "rows": [several.annotate(one) for one in made],
        "space_versions": newest,
        **(several.as_dict() if several.several else {}),
    }


def best_trial_row(engine: Engine, experiment_id: str, descending: bool, probe: int = 20) -> dict[str, Any] | None:
    """The table row of the best trial by the first objective among the counted statuses: the
    page sorted by metric and filtered by those statuses, its first row.

    Read as a probe: the ``probe`` trials of the best values (one index's walk, no status read)
    are filtered first; only when none of them counts is the whole filtered sort run. At
    100,000 trials the whole one read every trial's status: ~0.5-1 s of the summary. A trial
    without a value is never the best (the whole sort puts those last): None when no counted
    trial has one, whichever way it was found."""
    counted = sorted(COUNTED_STATUS_NAMES)
    order = VALUES.c.value.desc() if descending else VALUES.c.value.asc()
    with engine.connect() as conn:
        sid = study_id_of(conn, experiment_id)
        leaders = (
            conn.execute(
                sa.select(TRIAL_INDEX.c.trial_index)
                .select_from(
                    TRIAL_INDEX.join(
                        VALUES, sa.and_(VALUES.c.trial_id == TRIAL_INDEX.c.trial_id, VALUES.c.objective == 0)
                    )
                )
                .where(TRIAL_INDEX.c.study_id == sid)
                .order_by(order.nulls_last(), TRIAL_INDEX.c.trial_index)
                .limit(probe)
            )
            .scalars()
            .all()
        )
    if leaders:
        found = trials_page(
            engine, experiment_id, sort="metric", descending=descending, limit=1, statuses=counted, indexes=leaders
        )["rows"]
        if found or len(leaders) < probe:
            return found[0] if found else None
    rows = trials_page(engine, experiment_id, sort="metric", descending=descending, limit=1, statuses=counted)["rows"]
    return rows[0] if rows and rows[0]["metric"] is not None else None


def iter_trial_rows(engine: Engine, experiment_id: str, chunk: int = 1000) -> Iterator[dict[str, Any]]:
    """Every trial's table row in index order, streamed (the database cursor read ``chunk`` rows
    at a time): what the exports write, in memory that does not grow with the experiment. An
    unknown experiment raises here, before the first row is asked for."""
    several = objectives_of(engine, experiment_id)
    with engine.connect() as conn:
        sid = study_id_of(conn, experiment_id)
    return _streamed_rows(engine, sid, several, chunk)


def _streamed_rows(engine: Engine, sid: int, several: Objectives, chunk: int) -> Iterator[dict[str, Any]]:
    query, _ = _trials_query(engine, sid)
    with engine.connect() as conn:
        newest = newest_space(conn, sid)
        result = conn.execution_options(yield_per=chunk).execute(query.order_by(TRIAL_INDEX.c.trial_index))
        for rows in result.partitions():
            with engine.connect() as side:  # the streaming cursor holds the first connection
                counts = intermediate_counts(side, [r.storage_id for r in rows])
            for r in rows:
                yield several.annotate(_row(r, counts.get(r.storage_id, 0), newest))


def chart_rows(engine: Engine, experiment_id: str, indexes: Sequence[int] | None = None) -> list[dict[str, Any]]:
    """Trials' index, status, parameters, metric, times and platform, in index order: every
    trial, or those of ``indexes`` (read in chunks of bound parameters). What the charts draw
    and what parameter importance reads; no counts, no pagination."""
    status, params, handle, version = _attr("nni_status"), _attr("parameters"), _attr("handle"), _attr(VERSION_ATTR)
    with engine.connect() as conn:
        sid = study_id_of(conn, experiment_id)
        newest = newest_space(conn, sid)
        query = (
            sa.select(
                TRIAL_INDEX.c.trial_index,
                VALUES.c.value,
                TRIALS.c.datetime_start,
                TRIALS.c.datetime_complete,
                status.c.value_json,
                params.c.value_json,
                handle.c.value_json,
                version.c.value_json,
            )
            .select_from(
                TRIAL_INDEX.join(TRIALS, TRIALS.c.trial_id == TRIAL_INDEX.c.trial_id)
                .outerjoin(VALUES, sa.and_(VALUES.c.trial_id == TRIALS.c.trial_id, VALUES.c.objective == 0))
                .outerjoin(status, sa.and_(status.c.trial_id == TRIALS.c.trial_id, status.c.key == "nni_status"))
                .outerjoin(params, sa.and_(params.c.trial_id == TRIALS.c.trial_id, params.c.key == "parameters"))
                .outerjoin(handle, sa.and_(handle.c.trial_id == TRIALS.c.trial_id, handle.c.key == "handle"))
                .outerjoin(version, sa.and_(version.c.trial_id == TRIALS.c.trial_id, version.c.key == VERSION_ATTR))
            )
            .where(TRIAL_INDEX.c.study_id == sid)
            .order_by(TRIAL_INDEX.c.trial_index)
        )
        if indexes is None:
            rows = conn.execute(query).all()
        else:
            wanted = sorted(set(indexes))
            rows = []
            for start in range(0, len(wanted), _IN_CHUNK):
                chunk = wanted[start : start + _IN_CHUNK]
                rows.extend(conn.execute(query.where(TRIAL_INDEX.c.trial_index.in_(chunk))).all())
    several = objectives_of(engine, experiment_id)
    return [
        several.annotate(
            {
                "trial_index": index,
                "status": decoded(st) or "WAITING",
                "parameters": decoded(pa) or {},
                "metric": finite(value),
                "started": epoch(begun),
                "ended": epoch(done),
                "platform": (decoded(ha) or {}).get("platform"),
                "earlier_space": _version(ve) < newest,
            }
        )
        for index, value, begun, done, st, pa, ha, ve in rows
    ]


def _version(stored: str | None) -> int:
    """The space version a trial's attribute holds (0: the config's, or none recorded)."""
    value = decoded(stored)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


#: Bound parameters per ``IN`` list: far below SQLite's and PostgreSQL's limits.
_IN_CHUNK = 900


#: Points of one trial's curve on its page: enough for any screen, a few KB to send.
DETAIL_POINTS = 2000


def downsample(points: Iterable[Sequence[Any]], total: int, max_points: int) -> list[list[Any]]:
    """At most ``max_points`` of a curve's ``total`` (step, value) points, in step order, for
    display: the points are cut into ``max_points // 2`` buckets of consecutive points and each
    bucket keeps its lowest and its highest value (min-max decimation), so a spike or a dip
    is never hidden however many points there are; the first and last points always stay.
    One pass, constant memory beyond the output (``points`` may be a streamed cursor)."""
    if total <= max_points:
        return [[step, finite(value)] for step, value in points]
    buckets = max(1, (max_points - 4) // 2)  # + the first point, the last, and a last bucket of one
    out: list[list[Any]] = []
    current = -1
    low: list[Any] | None = None
    high: list[Any] | None = None
    last: list[Any] | None = None

    def flush() -> None:
        pair = sorted({id(p): p for p in (low, high) if p is not None}.values(), key=lambda p: p[0])
        out.extend(p for p in pair if not out or p[0] != out[-1][0])

    for i, (step, raw) in enumerate(points):
        point = [step, finite(raw)]
        last = point
        if i == 0:
            out.append(point)
            continue
        bucket = (i - 1) * buckets // max(1, total - 2)
        if bucket != current:
            flush()
            current, low, high = bucket, None, None
        value = point[1]
        if value is None:
            continue
        if low is None or value < low[1]:
            low = point
        if high is None or value > high[1]:
            high = point
    flush()
    if last is not None and out[-1][0] != last[0]:
        out.append(last)
    return out


#: Thinned curves of big trials by (store, trial, max points): (points in the store, last step,
#: the thinned points). A page of a trial with 1,000,000 results read them all each time (0.85 s).
_thinned: OrderedDict[tuple[str, int, int], tuple[int, int, list[list[Any]]]] = OrderedDict()
_thinned_lock = threading.Lock()
_THINNED_KEPT = 64


def _merge_by_step(points: list[list[Any]], max_points: int) -> list[list[Any]]:
    """At most ``max_points`` of ``points`` (a kept thinned curve plus the raw points that came
    after it, in step order), bucketed by *step* so the thinned stretch and the raw one are drawn
    with the same density: each bucket keeps its lowest and highest, both ends stay."""
    if len(points) <= max_points:
        return points
    buckets = max(1, (max_points - 4) // 2)
    first, last = points[0][0], points[-1][0]
    width = (last - first) / buckets or 1
    out: list[list[Any]] = [points[0]]
    grouped: dict[int, list[list[Any]]] = {}
    for point in points[1:-1]:
        grouped.setdefault(min(buckets - 1, int((point[0] - first) / width)), []).append(point)
    for bucket in sorted(grouped):
        valued = [p for p in grouped[bucket] if p[1] is not None]
        if valued:
            low, high = min(valued, key=lambda p: p[1]), max(valued, key=lambda p: p[1])
            out.extend(sorted({id(p): p for p in (low, high)}.values(), key=lambda p: p[0]))
    out.append(points[-1])
    return out


def _thinned_curve(conn: sa.Connection, store: str, storage_id: int, total: int, max_points: int) -> list[list[Any]]:
    """The trial's curve thinned to ``max_points``. A curve past that is kept here once thinned;
    when the trial has reported a few more points since (a running trial's page refreshing),
    only those are read and merged with the kept curve by step; many more, or an earlier step
    written meanwhile, and every point is read again (streamed)."""
    points = sa.select(INTERMEDIATE.c.step, INTERMEDIATE.c.intermediate_value).order_by(INTERMEDIATE.c.step)
    mine = points.where(INTERMEDIATE.c.trial_id == storage_id)
    if total <= max_points:
        return downsample(conn.execute(mine), total, max_points)
    key = (store, storage_id, max_points)
    with _thinned_lock:
        kept = _thinned.get(key)
    curve: list[list[Any]] | None = None
    if kept is not None and kept[0] == total:
        curve = kept[2]
    elif kept is not None and 0 < total - kept[0] <= max_points:
        new = [[step, finite(value)] for step, value in conn.execute(mine.where(INTERMEDIATE.c.step > kept[1]))]
        if len(new) == total - kept[0]:  # only later steps came
            curve = _merge_by_step(kept[2] + new, max_points)
    if curve is None:
        curve = downsample(conn.execution_options(yield_per=10_000).execute(mine), total, max_points)
    with _thinned_lock:
        _thinned[key] = (total, curve[-1][0] if curve else -1, curve)
        _thinned.move_to_end(key)
        while len(_thinned) > _THINNED_KEPT:
            _thinned.popitem(last=False)
    return curve


def trial_detail(
    engine: Engine, experiment_id: str, trial_index: int, max_points: int = DETAIL_POINTS
) -> dict[str, Any]:
    """One trial's row, handle, final extras and its curve (downsampled past ``max_points``;
    ``intermediate_total`` says how many points the store holds)."""
    page = trials_page(engine, experiment_id, indexes=[trial_index], limit=1)
    if not page["rows"]:
        raise UnknownExperiment(f"{experiment_id} trial {trial_index}")
    row = page["rows"][0]
    with engine.connect() as conn:
        storage_id = storage_id_of(conn, experiment_id, trial_index) or 0
        handle = decoded(
            conn.execute(
                sa.select(TRIAL_ATTRS.c.value_json).where(
                    TRIAL_ATTRS.c.trial_id == storage_id, TRIAL_ATTRS.c.key == "handle"
                )
            ).scalar()
        )
        extra = decoded(
            conn.execute(
                sa.select(TRIAL_ATTRS.c.value_json).where(
                    TRIAL_ATTRS.c.trial_id == storage_id, TRIAL_ATTRS.c.key == "final_metric_extra"
                )
            ).scalar()
        )
        restarts = decoded(
            conn.execute(
                sa.select(TRIAL_ATTRS.c.value_json).where(
                    TRIAL_ATTRS.c.trial_id == storage_id, TRIAL_ATTRS.c.key == "restarts"
                )
            ).scalar()
        )
        lineage = Lineage.from_attr(
            decoded(
                conn.execute(
                    sa.select(TRIAL_ATTRS.c.value_json).where(
                        TRIAL_ATTRS.c.trial_id == storage_id, TRIAL_ATTRS.c.key == "pbt"
                    )
                ).scalar()
            )
        )
        total = int(row.get("intermediate_count") or 0)
        intermediate = _thinned_curve(conn, str(engine.url), storage_id, total, max_points)
    return {
        **row,
        "handle": handle or {},
        "final_extra": extra or {},
        # Each restart after a fault: the attempt it began, the checkpoint step it loaded (None:
        # from scratch), when, and why (trialflow.experiment.keeping).
        "restarts": [r.__dict__ for r in restarts_from_attr(restarts)],
        # Population Based Training: its generation and member, its parent (the trial whose
        # checkpoint it started from) and whether it copied the parent's parameters.
        "lineage": lineage.to_attr() if lineage is not None else None,
        "intermediate": intermediate,
        "intermediate_total": total,
        # the experiment's newest search space version (a person may change the space while it
        # runs: trialflow.tuning.space_versions); the row says which the trial was asked under
        "space_versions": page["space_versions"],
    }


def curves(
    engine: Engine, experiment_id: str, indexes: Sequence[int] | None = None, *, top: int = 20, max_points: int = 200
) -> dict[str, Any]:
    """Intermediate results per trial: the given trials, or the ``top`` best finished ones plus
    the running ones; each curve thinned to at most ``max_points`` (evenly, last point kept)."""
    with engine.connect() as conn:
        sid = study_id_of(conn, experiment_id)
    status = _attr("nni_status")
    base = (
        sa.select(TRIAL_INDEX.c.trial_index, status.c.value_json)
        .select_from(
            TRIAL_INDEX.join(TRIALS, TRIALS.c.trial_id == TRIAL_INDEX.c.trial_id)
            .outerjoin(VALUES, sa.and_(VALUES.c.trial_id == TRIALS.c.trial_id, VALUES.c.objective == 0))
            .outerjoin(status, sa.and_(status.c.trial_id == TRIALS.c.trial_id, status.c.key == "nni_status"))
        )
        .where(TRIAL_INDEX.c.study_id == sid)
    )
    with engine.connect() as conn:
        if indexes is None:
            minimize = optimize_mode(engine, experiment_id) == "minimize"
            best = conn.execute(
                base.where(
                    status.c.value_json.in_([json.dumps(s) for s in sorted(COUNTED_STATUS_NAMES)]),
                    VALUES.c.value.is_not(None),
                )
                .order_by(VALUES.c.value.asc() if minimize else VALUES.c.value.desc())
                .limit(top)
            ).all()
            others = conn.execute(
                base.where(status.c.value_json.in_([json.dumps(s) for s in ACTIVE] + [json.dumps("EARLY_STOPPED")]))
                .order_by(TRIAL_INDEX.c.trial_index.desc())
                .limit(top)
            ).all()
            picked = [*best, *others]
        else:
            picked = [*conn.execute(base.where(TRIAL_INDEX.c.trial_index.in_([int(i) for i in indexes][:50]))).all()]
    chosen = {index: decoded(st) or "WAITING" for index, st in picked}
    if not chosen:
        return {"curves": []}
    with engine.connect() as conn:
        ids = dict(
            conn.execute(
                sa.select(TRIAL_INDEX.c.trial_id, TRIAL_INDEX.c.trial_index).where(
                    TRIAL_INDEX.c.study_id == sid, TRIAL_INDEX.c.trial_index.in_(list(chosen))
                )
            ).all()
        )
        points: dict[int, list] = {}
        for trial_id, step, value in conn.execute(
            sa.select(INTERMEDIATE.c.trial_id, INTERMEDIATE.c.step, INTERMEDIATE.c.intermediate_value)
            .where(INTERMEDIATE.c.trial_id.in_(list(ids)))
            .order_by(INTERMEDIATE.c.trial_id, INTERMEDIATE.c.step)
        ):
            points.setdefault(ids[trial_id], []).append([step, finite(value)])
    out = []
    for index, status_name in sorted(chosen.items()):
        series = points.get(index, [])
        series = downsample(series, len(series), max_points)
        out.append({"trial_index": index, "status": status_name, "points": series, "total": len(points.get(index, []))})
    return {"curves": out}


def generations(engine: Engine, experiment_id: str, size: int) -> list[dict[str, Any]]:
    """Population Based Training's progress: per generation (trial index // ``size``) that has
    trials, how many it has and how many of them ended (one grouped query)."""
    with engine.connect() as conn:
        sid = study_id_of(conn, experiment_id)
        generation = (TRIAL_INDEX.c.trial_index // size).label("generation")
        settled = sa.cast(TRIALS.c.state, sa.String(8)).not_in(["RUNNING", "WAITING"])
        rows = conn.execute(
            sa.select(generation, sa.func.count(), sa.func.sum(sa.case((settled, 1), else_=0)))
            .select_from(TRIAL_INDEX.join(TRIALS, TRIALS.c.trial_id == TRIAL_INDEX.c.trial_id))
            .where(TRIAL_INDEX.c.study_id == sid)
            .group_by(generation)
            .order_by(generation)
        ).all()
    return [{"generation": int(g), "trials": int(n), "ended": int(e or 0)} for g, n, e in rows]

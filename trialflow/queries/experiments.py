"""The experiment list and an experiment's header: counts, best trial, budgets."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from trialflow.config.model import AlgorithmConfig
from trialflow.experiment import GROUP_ATTR
from trialflow.experiment.run_windows import LIKE_PATTERN, RunWindow, run_id_of, shown_window
from trialflow.queries.objectives import objectives_of
from trialflow.queries.settled import sql_tallies, study_trials
from trialflow.queries.tables import (
    ACTIVE,
    STUDIES,
    STUDY_ATTRS,
    TRIAL_ATTRS,
    TRIAL_INDEX,
    TRIALS,
    decoded,
    finite,
    state_in,
    study_attrs,
    study_id_of,
)
from trialflow.queries.tracking import experiment_tracking
from trialflow.queries.trials import best_trial_row, generations, trials_page
from trialflow.seeding.nni_import import IMPORTED_ATTR
from trialflow.seeding.retune import RETUNED_BY, RETUNED_FROM
from trialflow.seeding.warm_start import WARM_STARTED_BY, WARM_STARTED_FROM
from trialflow.store.pareto import OBJECTIVES_ATTR
from trialflow.tuning.pbt import PbtArgs

_LIST_ATTRS = (
    "experiment_name",
    "dag_id",
    GROUP_ATTR,
    "run_id",
    "platform",
    "optimize_mode",
    "config",
    OBJECTIVES_ATTR,
    IMPORTED_ATTR,
)


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
    #: Who stopped it, when and why ({"by", "at", "reason"}), when a person (or Airflow's
    #: mark failed on its DAG run) stopped it; None otherwise.
    stopped: dict[str, Any] | None = None
    #: Every run of it is over (its end step ran, or it was stopped), though its DAG run may go
    #: on with later tasks (an approval): nothing is left to steer.
    runs_over: bool = False
    #: Several objectives: how many trials are in the Pareto set (``best`` is then None: there is
    #: no single best); None with one objective.
    pareto_size: int | None = None
    #: The task group of the DAG whose experiment this is (ExperimentTaskGroup); None for a
    #: whole-DAG experiment.
    task_group: str | None = None
    #: NNI's experiment id, for an experiment `trialflow import-nni` brought in.
    imported_from: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def stopped_of(windows: Iterable[Any]) -> dict[str, Any] | None:
    """The newest stop among an experiment's run windows ({"by", "at", "reason"}), or None."""
    parsed = [RunWindow.parse(w) for w in windows if isinstance(w, dict)]
    stops = [w.stopped for w in parsed if isinstance(w.stopped, dict)]
    if not stops:
        return None
    newest = max(stops, key=lambda s: s.get("at") or 0)
    return {"by": newest.get("by"), "at": newest.get("at"), "reason": newest.get("reason")}


def runs_over(windows: Iterable[Any]) -> bool:
    """Whether the experiment had runs and every one is over (trialflow.steering.check_running's
    rule: the actions refuse it then, so the pages offer none)."""
    parsed = [RunWindow.parse(w) for w in windows if isinstance(w, dict)]
    return bool(parsed) and all(w.over for w in parsed)


def _run_windows(conn: sa.Connection, study_ids: Sequence[int] | None) -> dict[int, list[Any]]:
    query = sa.select(STUDY_ATTRS.c.study_id, STUDY_ATTRS.c.value_json).where(STUDY_ATTRS.c.key.like(LIKE_PATTERN))
    if study_ids is not None:
        query = query.where(STUDY_ATTRS.c.study_id.in_(list(study_ids)))
    out: dict[int, list[Any]] = {}
    for study_id, value in conn.execute(query):
        out.setdefault(study_id, []).append(decoded(value))
    return out


def _algorithm_name(config: dict[str, Any] | None) -> str | None:
    for key in ("tuner", "advisor"):
        algorithm = (config or {}).get(key)
        if isinstance(algorithm, dict):
            return algorithm.get("name") or algorithm.get("className")
    return None


def list_experiments(engine: Engine, kept: bool = True) -> list[ExperimentRow]:
    """Every experiment in the store (running, finished, or of a DAG that no longer exists).
    ``kept``: tally them from the trials this process keeps (a server, which asks again); a
    command that reads once asks SQL's aggregates instead (settled.sql_tallies)."""
    with engine.connect() as conn:
        studies = {sid: name for sid, name in conn.execute(sa.select(STUDIES.c.study_id, STUDIES.c.study_name))}
        attrs = study_attrs(conn, None, _LIST_ATTRS)
        windows = _run_windows(conn, None)
    # not a trialflow experiment: another Optuna study in the same database
    ours = [sid for sid in studies if "dag_id" in attrs.get(sid, {}) or "config" in attrs.get(sid, {})]
    if kept:
        tallies = {sid: study.whole_tally() for sid, study in study_trials(engine, ours, time.time()).items()}
    else:
        tallies = sql_tallies(engine, ours)
    rows = []
    for sid in ours:
        name = studies[sid]
        a = attrs.get(sid, {})
        config = a.get("config") or {}
        mode = a.get("optimize_mode") or "maximize"
        tally = tallies[sid]
        c = tally.counts
        several = len(a.get(OBJECTIVES_ATTR) or ()) > 1  # no single best: the Pareto set's size
        pareto_size = len(objectives_of(engine, name).pareto) if several else None
        rows.append(
            ExperimentRow(
                experiment_id=name,
                name=a.get("experiment_name"),
                dag_id=a.get("dag_id"),
                run_id=a.get("run_id"),
                platform=a.get("platform"),
                tuner=_algorithm_name(config),
                optimize_mode=mode,
                counts=c,
                trials=sum(c.values()),
                best=None if several else finite(tally.low if mode == "minimize" else tally.high),
                started=tally.started,
                ended=tally.ended,
                max_trial_number=config.get("maxTrialNumber"),
                active=any(c.get(s) for s in ACTIVE),
                stopped=stopped_of(windows.get(sid, [])),
                runs_over=runs_over(windows.get(sid, [])),
                pareto_size=pareto_size,
                task_group=a.get(GROUP_ATTR),
                imported_from=(a.get(IMPORTED_ATTR) or {}).get("nni_id")
                if isinstance(a.get(IMPORTED_ATTR), dict)
                else None,
            )
        )
    return sorted(rows, key=lambda r: r.started or 0, reverse=True)


def experiment_dag_id(engine: Engine, experiment_id: str) -> str | None:
    """The DAG an experiment belongs to (for access checks: one indexed lookup)."""
    with engine.connect() as conn:
        sid = study_id_of(conn, experiment_id)
        return decoded(
            conn.execute(
                sa.select(STUDY_ATTRS.c.value_json).where(STUDY_ATTRS.c.study_id == sid, STUDY_ATTRS.c.key == "dag_id")
            ).scalar()
        )


def secret_input_values(engine: Engine, experiment_id: str) -> list[str]:
    """The values of every run's secret inputs (trialflow.experiment.run_windows), to mask them in what a
    trial wrote (its log tail), since a trial may print what it was given."""
    with engine.connect() as conn:
        sid = study_id_of(conn, experiment_id)
        windows = _run_windows(conn, [sid]).get(sid, [])
    return [v for raw in windows if isinstance(raw, dict) for v in RunWindow.parse(raw).secret_values()]


def experiment_config(engine: Engine, experiment_id: str) -> dict[str, Any]:
    """The experiment's stored config (as its start step wrote it; {} when none)."""
    with engine.connect() as conn:
        sid = study_id_of(conn, experiment_id)
        config = decoded(
            conn.execute(
                sa.select(STUDY_ATTRS.c.value_json).where(STUDY_ATTRS.c.study_id == sid, STUDY_ATTRS.c.key == "config")
            ).scalar()
        )
    return config if isinstance(config, dict) else {}


def _windows_of(conn: sa.Connection, sid: int) -> list[dict[str, Any]]:
    """The experiment's run windows as the pages show them, each with its run id."""
    runs = conn.execute(
        sa.select(STUDY_ATTRS.c.key, STUDY_ATTRS.c.value_json).where(
            STUDY_ATTRS.c.study_id == sid, STUDY_ATTRS.c.key.like(LIKE_PATTERN)
        )
    ).all()
    return [dict(shown_window(decoded(value) or {}), run_id=run_id_of(key)) for key, value in runs]


def experiment_header(engine: Engine, experiment_id: str) -> dict[str, Any]:
    """What a trial's page needs of its experiment: where it runs (DAG, group, run windows),
    whether a person stopped it and whether any trial is still active. The keys are
    experiment_summary's, without its counts, times and best trial: those read every trial, and
    at 20,000 trials they were most of a trial detail's time over HTTP (349 ms against 4 ms for
    the trial's own query; 78 ms with this, bench/ui.py)."""
    status = TRIAL_ATTRS.alias("st")
    with engine.connect() as conn:
        sid = study_id_of(conn, experiment_id)
        attrs = dict(study_attrs(conn, [sid], ("dag_id", GROUP_ATTR, "run_id")).get(sid, {}))
        windows = _windows_of(conn, sid)
        # active: an indexed trial Optuna has not closed whose NNI status is active (or unset);
        # found from the trials by (study, state), schema 0003's index: through trialflow's index
        # of the study's trials it read every trial (~40 ms of each trial page at 100,000)
        active = conn.execute(
            sa.select(TRIALS.c.trial_id)
            .select_from(
                TRIALS.join(TRIAL_INDEX, TRIAL_INDEX.c.trial_id == TRIALS.c.trial_id).outerjoin(
                    status, sa.and_(status.c.trial_id == TRIALS.c.trial_id, status.c.key == "nni_status")
                )
            )
            .where(
                TRIALS.c.study_id == sid,
                state_in("RUNNING", "WAITING"),
                sa.or_(status.c.value_json.is_(None), status.c.value_json.in_([json.dumps(s) for s in ACTIVE])),
            )
            .limit(1)
        ).first()
    return {
        "experiment_id": experiment_id,
        "dag_id": attrs.get("dag_id"),
        "task_group": attrs.get(GROUP_ATTR),
        "run_id": attrs.get("run_id"),
        "active": active is not None,
        "runs": sorted(windows, key=lambda w: w.get("first_index", 0)),
        "stopped": stopped_of(windows),
    }


def experiment_summary(engine: Engine, experiment_id: str) -> dict[str, Any]:
    """The experiment page's header: config essentials, counts, best trial, time and trial budgets."""
    with engine.connect() as conn:
        sid = study_id_of(conn, experiment_id)
        wanted = _LIST_ATTRS + ("directory", "limits", RETUNED_FROM, RETUNED_BY, WARM_STARTED_FROM, WARM_STARTED_BY)
        attrs = dict(study_attrs(conn, [sid], wanted).get(sid, {}))
        windows = _windows_of(conn, sid)
    tally = study_trials(engine, [sid], time.time())[sid].whole_tally()
    counts = tally.counts
    config = attrs.get("config") or {}
    limits = attrs.get("limits")
    changed: dict[str, Any] = limits if isinstance(limits, dict) else {}
    mode = attrs.get("optimize_mode") or "maximize"
    best_value = finite(tally.low if mode == "minimize" else tally.high)
    best = None
    several = objectives_of(engine, experiment_id)
    pareto: list[dict[str, Any]] = []
    if several.several:  # "best" is the Pareto set; its first member (by the first objective) heads it
        members = trials_page(engine, experiment_id, indexes=several.pareto, limit=len(several.pareto) or 1)
        by_index = {r["trial_index"]: r for r in members["rows"]}
        pareto = [by_index[i] for i in several.pareto if i in by_index]
        best = pareto[0] if pareto else None
    elif best_value is not None:
        best = best_trial_row(engine, experiment_id, descending=mode != "minimize")
    deadline = max((w.get("deadline") or 0 for w in windows), default=0) or None
    service = config.get("trainingService")
    services = service if isinstance(service, list) else [service] if service else []
    return {
        "experiment_id": experiment_id,
        "name": attrs.get("experiment_name"),
        "dag_id": attrs.get("dag_id"),
        "task_group": attrs.get(GROUP_ATTR),
        "run_id": attrs.get("run_id"),
        "platform": attrs.get("platform"),
        "optimize_mode": mode,
        "directory": attrs.get("directory"),
        "counts": counts,
        "trials": sum(counts.values()),
        "active": any(counts.get(s) for s in ACTIVE),
        "best": best,
        # several objectives: [{"metric", "mode"}, ...] and the Pareto set's rows (else empty)
        "objectives": several.objectives,
        "pareto": pareto,
        "started": tally.started,
        "ended": tally.ended,
        "deadline": deadline,
        "runs": sorted(windows, key=lambda w: w.get("first_index", 0)),
        "stopped": stopped_of(windows),
        "runs_over": runs_over(windows),
        "changed": changed,
        # scheduledRuns: retune: the experiment this one re-tuned (its best sets ran first here),
        # and the later ones that re-tuned this one (all of the same DAG).
        "retuned_from": _retuned_from(attrs.get(RETUNED_FROM)),
        "retuned_by": [e for e in attrs.get(RETUNED_BY) or [] if isinstance(e, str)],
        # warmStart: the experiment this one started from (its results taught the tuner, or its
        # best sets ran first), and the later ones that started from this one.
        "warm_started_from": _warm_started_from(attrs.get(WARM_STARTED_FROM)),
        "warm_started_by": [e for e in attrs.get(WARM_STARTED_BY) or [] if isinstance(e, str)],
        # An NNI experiment brought in by `trialflow import-nni` (its times are NNI's).
        "imported_from": _imported_from(attrs.get(IMPORTED_ATTR)),
        # Population Based Training: the population's size and each generation's progress.
        "population": _population(
            engine, experiment_id, config, changed.get("maxTrialNumber", config.get("maxTrialNumber"))
        ),
        # MLflow (the config's mlflow key): the experiment's run page, and whether the server is away.
        "mlflow": experiment_tracking(engine, experiment_id),
        "config": {
            "tuner": config.get("tuner") or config.get("advisor"),
            "assessor": config.get("assessor"),
            # The limits as a person changed them while it ran (``changed`` says which).
            "trialConcurrency": changed.get("trialConcurrency", config.get("trialConcurrency")),
            "maxTrialNumber": changed.get("maxTrialNumber", config.get("maxTrialNumber")),
            "maxExperimentDuration": changed.get("maxExperimentDuration", config.get("maxExperimentDuration")),
            "maxTrialDuration": config.get("maxTrialDuration"),
            "trialCommand": config.get("trialCommand"),
            "platforms": [s.get("platform") for s in services if isinstance(s, dict)],
            "searchSpace": config.get("searchSpace"),
        },
    }


def _population(engine: Engine, experiment_id: str, config: dict[str, Any], budget: Any) -> dict[str, Any] | None:
    """PBT's population (its size, the generations the trial budget makes: ``budget`` is
    maxTrialNumber as a person may have changed it, each one's trials and ended ones); None for
    another tuner, or for classArgs the store holds that no validated config has."""
    raw = config.get("tuner")
    try:
        tuner = AlgorithmConfig.model_validate(raw) if isinstance(raw, dict) else None
        if tuner is None or not tuner.population_based:
            return None
        args = PbtArgs.from_class_args(tuner.class_args)
    except (TypeError, ValueError):
        return None
    if args.population_size < 1:
        return None
    planned = -(-budget // args.population_size) if isinstance(budget, int) and budget > 0 else None
    return {
        "size": args.population_size,
        "planned": planned,
        "generations": generations(engine, experiment_id, args.population_size),
    }


def _warm_started_from(raw: Any) -> dict[str, Any] | None:
    if not isinstance(raw, dict) or not raw.get("experiment_id"):
        return None
    return {
        "experiment_id": raw["experiment_id"],
        "use": raw.get("use"),
        "learnt": raw.get("learnt") or 0,
        "queued": len(raw.get("queued") or []),
        "dropped": len(raw.get("dropped") or []),
    }


def _imported_from(raw: Any) -> dict[str, Any] | None:
    if not isinstance(raw, dict) or not raw.get("nni_id"):
        return None
    return {"system": "NNI", "nni_id": raw["nni_id"], "swapped": raw.get("swapped") or 0}


def _retuned_from(raw: Any) -> dict[str, Any] | None:
    if not isinstance(raw, dict) or not raw.get("experiment_id"):
        return None
    return {
        "experiment_id": raw["experiment_id"],
        "queued": len(raw.get("queued") or []),
        "dropped": len(raw.get("dropped") or []),
    }

"""Parameter importance over NNI's (possibly nested) parameters."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from trialflow.queries.charts import even_spread
from trialflow.queries.settled import study_trials
from trialflow.queries.tables import TRIAL_INDEX, VALUES, optimize_mode, study_id_of
from trialflow.queries.trials import chart_rows
from trialflow.trial.status import COUNTED_STATUS_NAMES


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
_computing = threading.Lock()
#: Trials PED-ANOVA reads at most (an even spread of them past it): 84,971 trials took 19 s of
#: the API server's CPU, holding the interpreter every other page waited on
#: (bench/RESULTS.md compares the two figures).
IMPORTANCE_TRIALS = 2000


def importance(engine: Engine, experiment_id: str) -> dict[str, Any]:
    """Parameter importance of the finished trials (Optuna's PED-ANOVA evaluator, which needs no
    extra library), over the NNI parameters flattened; cached per count of finished trials.
    Past ``IMPORTANCE_TRIALS`` counted trials, over an even spread of them (``trials`` of
    ``of``)."""
    with engine.connect() as conn:
        sid = study_id_of(conn, experiment_id)
        finished = conn.execute(
            sa.select(sa.func.count())
            .select_from(TRIAL_INDEX.join(VALUES, VALUES.c.trial_id == TRIAL_INDEX.c.trial_id))
            .where(TRIAL_INDEX.c.study_id == sid)
        ).scalar()
    key = (str(engine.url), experiment_id, int(finished or 0))
    if key in _importance_cache:
        return _importance_cache[key]
    with _computing:  # one computation at a time: a page's three loads asked for the same one
        if key not in _importance_cache:
            _importance_cache[key] = _computed(engine, experiment_id, sid)
    return _importance_cache[key]


def _computed(engine: Engine, experiment_id: str, sid: int) -> dict[str, Any]:
    counted = sorted(
        t.index
        for t in study_trials(engine, [sid], time.time())[sid].trials()
        if t.status in COUNTED_STATUS_NAMES and t.value is not None
    )
    chosen = even_spread(counted, IMPORTANCE_TRIALS)
    rows = [
        r
        for r in chart_rows(engine, experiment_id, chosen)
        if r["status"] in COUNTED_STATUS_NAMES and r["metric"] is not None
    ]
    result: dict[str, Any] = {
        "importances": {},
        "trials": len(rows),
        "of": len(counted),
        "evaluator": "PED-ANOVA",
        "note": None,
    }
    if len(rows) < 4:
        result["note"] = "needs at least 4 trials with a final result"
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
    mode = optimize_mode(engine, experiment_id)
    study = optuna.create_study(direction=mode)
    for f, r in zip(flat, rows):
        params = {
            n: (float(f[n]) if isinstance(distributions[n], FloatDistribution) else json.dumps(f[n]))
            for n in distributions
            if f.get(n) is not None
        }
        dists = {n: distributions[n] for n in params}
        study.add_trial(optuna.trial.create_trial(params=params, distributions=dists, value=r["metric"]))
    try:
        importances = optuna.importance.get_param_importances(
            study, evaluator=optuna.importance.PedAnovaImportanceEvaluator(), normalize=True
        )
        result["importances"] = {k: float(v) for k, v in importances.items()}
    except (ValueError, RuntimeError) as exc:
        result["note"] = f"importance could not be computed: {exc}"
    return result

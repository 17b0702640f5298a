"""Fill an experiment store with finished trials in bulk, for the benchmarks at 20,000 trials.

Writing 20,000 trials x 100 intermediate results through Optuna's storage API (one
transaction per trial) takes ~25 minutes here; the benchmarks measure reading them, not
writing them, so this writes the same rows Optuna and trialflow write (trials, values,
parameters with their distributions, intermediate values, user attributes, trialflow's index
table) as a few multi-row inserts. ``check_same_as_optuna`` (run by ``--check``) seeds a small
store both ways and compares every trial field by field, so the shortcut stays honest.

    python bench/seed.py --check
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from itertools import islice
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # imported by a bench that may have put another checkout first (--source)
    sys.path.insert(0, str(ROOT))

import optuna  # noqa: E402
import sqlalchemy as sa  # noqa: E402
from optuna.trial import FrozenTrial  # noqa: E402

from trialflow.store.experiment_store import TRIAL_INDEX, ExperimentStore, sqlite_url  # noqa: E402
from trialflow.store.optuna_internals import models  # noqa: E402

CHUNK = 5000


def _chunks(rows: Iterable[dict[str, Any]]) -> Iterator[list[dict[str, Any]]]:
    it = iter(rows)
    while chunk := list(islice(it, CHUNK)):
        yield chunk


def bulk_add(store: ExperimentStore, experiment_id: str, trials: Sequence[FrozenTrial]) -> None:
    """Add finished trials to the experiment as Optuna's ``add_trial`` would (numbers follow the
    study's, ids the table's) and index them by their ``trial_index`` user attribute."""
    if not trials:
        return
    study_id = store.storage.get_study_id_from_name(experiment_id)
    tables = {m.__tablename__: m.__table__ for m in models.BaseModel.__subclasses__() if hasattr(m, "__table__")}
    t_trials = tables["trials"]
    with store.engine.begin() as conn:
        first_id = (conn.execute(sa.select(sa.func.max(t_trials.c.trial_id))).scalar() or 0) + 1
        first_number = conn.execute(
            sa.select(sa.func.count()).select_from(t_trials).where(t_trials.c.study_id == study_id)
        ).scalar()
        ids = range(first_id, first_id + len(trials))
        conn.execute(
            t_trials.insert(),
            [
                {
                    "trial_id": tid,
                    "number": first_number + i,
                    "study_id": study_id,
                    "state": t.state,
                    "datetime_start": t.datetime_start,
                    "datetime_complete": t.datetime_complete,
                }
                for i, (tid, t) in enumerate(zip(ids, trials, strict=True))
            ],
        )

        if conn.dialect.name == "postgresql":  # explicit ids: move the id sequence past them
            sequence = "pg_get_serial_sequence('trials', 'trial_id')"
            conn.execute(sa.text(f"SELECT setval({sequence}, (SELECT max(trial_id) FROM trials))"))

        def values() -> Iterator[dict[str, Any]]:
            for tid, t in zip(ids, trials, strict=True):
                for objective, value in enumerate(t.values or ()):
                    stored, kind = models.TrialValueModel.value_to_stored_repr(value)
                    yield {"trial_id": tid, "objective": objective, "value": stored, "value_type": kind}

        def params() -> Iterator[dict[str, Any]]:
            for tid, t in zip(ids, trials, strict=True):
                for name, value in t.params.items():
                    dist = t.distributions[name]
                    yield {
                        "trial_id": tid,
                        "param_name": name,
                        "param_value": dist.to_internal_repr(value),
                        "distribution_json": optuna.distributions.distribution_to_json(dist),
                    }

        def intermediate() -> Iterator[dict[str, Any]]:
            for tid, t in zip(ids, trials, strict=True):
                for step, value in t.intermediate_values.items():
                    stored, kind = models.TrialIntermediateValueModel.intermediate_value_to_stored_repr(value)
                    yield {"trial_id": tid, "step": step, "intermediate_value": stored, "intermediate_value_type": kind}

        def attrs() -> Iterator[dict[str, Any]]:
            for tid, t in zip(ids, trials, strict=True):
                for key, value in t.user_attrs.items():
                    yield {"trial_id": tid, "key": key, "value_json": json.dumps(value)}

        def indexed() -> Iterator[dict[str, Any]]:
            for tid, t in zip(ids, trials, strict=True):
                if "trial_index" in t.user_attrs:
                    yield {"study_id": study_id, "trial_index": t.user_attrs["trial_index"], "trial_id": tid}

        for table, rows in (
            (tables["trial_values"], values()),
            (tables["trial_params"], params()),
            (tables["trial_intermediate_values"], intermediate()),
            (tables["trial_user_attributes"], attrs()),
            (TRIAL_INDEX, indexed()),
        ):
            for chunk in _chunks(rows):
                conn.execute(table.insert(), chunk)


def _sample(count: int, first_index: int = 0) -> list[FrozenTrial]:
    import random

    rng = random.Random(7)
    dists = {
        "lr": optuna.distributions.FloatDistribution(1e-5, 1e-1, log=True),
        "act": optuna.distributions.CategoricalDistribution(["relu", "tanh"]),
        "layers": optuna.distributions.IntDistribution(1, 8),
    }
    out = []
    for i in range(count):
        params = {"lr": 10 ** rng.uniform(-5, -1), "act": rng.choice(["relu", "tanh"]), "layers": rng.randint(1, 8)}
        state = optuna.trial.TrialState.COMPLETE if i % 5 else optuna.trial.TrialState.PRUNED
        out.append(
            optuna.trial.create_trial(
                state=state,
                value=rng.random() if state == optuna.trial.TrialState.COMPLETE else None,
                params=params,
                distributions=dists,
                intermediate_values={s: rng.random() for s in range(3)},
                user_attrs={"trial_index": first_index + i, "parameters": params, "nni_status": "SUCCEEDED"},
            )
        )
    return out


def check_same_as_optuna() -> bool:
    """Seed 50 trials through Optuna's add_trials and through bulk_add; every field must match."""
    with tempfile.TemporaryDirectory() as tmp:
        got = []
        for way in ("optuna", "bulk"):
            store = ExperimentStore(sqlite_url(Path(tmp) / f"{way}.db"))
            store.open_experiment("e")
            trials = _sample(50)
            if way == "optuna":
                optuna.load_study(study_name="e", storage=store.storage).add_trials(trials)
            else:
                bulk_add(store, "e", trials)
            got.append(store.storage.get_all_trials(store.storage.get_study_id_from_name("e")))
        fields = ("number", "state", "values", "params", "distributions", "user_attrs", "intermediate_values")
        return all(getattr(a, f) == getattr(b, f) for a, b in zip(*got, strict=True) for f in fields)


if __name__ == "__main__":
    if "--check" in sys.argv:
        ok = check_same_as_optuna()
        print("bulk_add writes what Optuna's add_trials writes:", "PASS" if ok else "FAIL")
        sys.exit(0 if ok else 1)

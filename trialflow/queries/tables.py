"""The tables the read models query, and the small helpers every read model shares.

Optuna's tables are the ones Optuna's models declare (trialflow.store.optuna_tables, the one
way trialflow names them); trialflow's trial index is its own (trialflow.store.tables). Optuna's
enum columns (a trial's state, a value's type) are compared with untyped literals (``state_in``)
or read cast to text where a read model keeps the name.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, Literal

import sqlalchemy as sa
from pydantic_core import from_json
from sqlalchemy.engine import Engine

from trialflow.store.optuna_tables import DIRECTIONS, INTERMEDIATE, STUDIES, STUDY_ATTRS, TRIAL_ATTRS, TRIALS, VALUES
from trialflow.store.tables import TRIAL_INDEX

__all__ = [
    "ACTIVE",
    "DIRECTIONS",
    "INTERMEDIATE",
    "MAX_PAGE",
    "ROW_ATTRS",
    "STATUSES",
    "STUDIES",
    "STUDY_ATTRS",
    "TRIALS",
    "TRIAL_ATTRS",
    "TRIAL_INDEX",
    "VALUES",
    "UnknownExperiment",
    "optimize_mode",
    "study_id_of",
]

#: The trial attributes a row shows (Optuna user attributes written by trialflow's store).
ROW_ATTRS = (
    "trial_id",
    "nni_status",
    "parameters",
    "final_metric",
    "message",
    "handle",
    "service_index",
    "started_at",
    "asked_by",
    "space_version",  # the search space version it was asked under (trialflow.tuning.space_versions)
)
STATUSES = ("WAITING", "RUNNING", "SUCCEEDED", "FAILED", "USER_CANCELED", "SYS_CANCELED", "EARLY_STOPPED")
ACTIVE = ("WAITING", "RUNNING")
MAX_PAGE = 500


class UnknownExperiment(LookupError):
    """No experiment (study) of that id in the store."""


def decoded(text: str | None) -> Any:
    """A user attribute's JSON value; None for a missing or unreadable one (a page shows a gap,
    not an error, for a row another writer left half-done).

    Parsed by pydantic-core's parser, ~4x faster than the json module's (the chart data of
    100,000 trials decodes 300,000 values: ~5 s of its profile were json.loads). It refuses
    what the json module reads and Optuna may have written (a lone surrogate, "\\ud800"): those
    are read again by the json module, so every value reads as the json module reads it. Nesting deeper than
    pydantic-core's 200 levels is read by the json module too, which past Python's recursion
    limit raised RecursionError (a 500 for the whole page): that is unreadable, None.

    JSON's NaN and Infinity, which Python's json module writes (a parameter a hand-edited store
    or another writer left as NaN) and no page can send (JSON has none: the answer failed whole,
    a 500), read as their text, "NaN", "Infinity", "-Infinity": shown as stored."""
    if text is None:
        return None
    try:
        return from_json(text, allow_inf_nan=False)
    except ValueError:
        pass
    try:
        return json.loads(text, parse_constant=str)
    except (ValueError, RecursionError):
        return None


def epoch(value: datetime | None) -> float | None:
    """Optuna stores naive local times (datetime.now()); as epoch seconds for the pages."""
    return None if value is None else value.timestamp()


def finite(value: float | None) -> float | None:
    """JSON has no NaN or infinity: a diverged metric is shown as no metric."""
    return value if value is not None and math.isfinite(value) else None


#: Optuna's trial states (the names its enum column stores).
TRIAL_STATES = frozenset({"RUNNING", "COMPLETE", "PRUNED", "FAIL", "WAITING"})


def state_in(*states: str) -> sa.ColumnElement[bool]:
    """Optuna's trial state is one of ``states``, said so that schema 0003's (study, state) index
    answers it: compared with untyped literals, which PostgreSQL reads as its enum type (a bound
    VARCHAR is refused there, and a CAST of the column hides the index on both databases)."""
    unknown = set(states) - TRIAL_STATES
    if unknown:
        raise ValueError(f"not Optuna trial states: {sorted(unknown)}")
    return TRIALS.c.state.in_([sa.literal_column(f"'{state}'") for state in states])


def dialect_of(engine: Engine) -> str:
    return engine.dialect.name


def study_id_of(conn: sa.Connection, experiment_id: str) -> int:
    """The Optuna study id of an experiment id; UnknownExperiment if there is none."""
    found = conn.execute(sa.select(STUDIES.c.study_id).where(STUDIES.c.study_name == experiment_id)).scalar()
    if found is None:
        raise UnknownExperiment(experiment_id)
    return int(found)


def storage_id_of(conn: sa.Connection, experiment_id: str, trial_index: int) -> int | None:
    """The store's id of an experiment's trial (None: no such trial); an unknown experiment raises."""
    sid = study_id_of(conn, experiment_id)
    found = conn.execute(
        sa.select(TRIAL_INDEX.c.trial_id).where(TRIAL_INDEX.c.study_id == sid, TRIAL_INDEX.c.trial_index == trial_index)
    ).scalar()
    return None if found is None else int(found)


def study_attrs(conn: sa.Connection, study_ids: Sequence[int] | None, keys: Iterable[str]) -> dict[int, dict]:
    query = sa.select(STUDY_ATTRS.c.study_id, STUDY_ATTRS.c.key, STUDY_ATTRS.c.value_json).where(
        STUDY_ATTRS.c.key.in_(list(keys))
    )
    if study_ids is not None:
        query = query.where(STUDY_ATTRS.c.study_id.in_(list(study_ids)))
    out: dict[int, dict] = {}
    for study_id, key, value in conn.execute(query):
        out.setdefault(study_id, {})[key] = decoded(value)
    return out


def optimize_mode(engine: Engine, experiment_id: str) -> Literal["maximize", "minimize"]:
    """The direction the experiment optimises (NNI's optimize_mode; maximize unless set)."""
    with engine.connect() as conn:
        sid = study_id_of(conn, experiment_id)
        mode = decoded(
            conn.execute(
                sa.select(STUDY_ATTRS.c.value_json).where(
                    STUDY_ATTRS.c.study_id == sid, STUDY_ATTRS.c.key == "optimize_mode"
                )
            ).scalar()
        )
    return "minimize" if mode == "minimize" else "maximize"

"""Several objectives in the read models: each trial's values by name and the Pareto set, for the
pages, the CLI and exports (the end step computes the same set from the same values through
trialflow.store.pareto).

Optuna keeps one ``trial_values`` row per objective of a COMPLETE trial; an experiment with one
objective has none of this and every function here returns "nothing" after one indexed read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from trialflow.queries.tables import STUDY_ATTRS, TRIAL_INDEX, TRIALS, VALUES, decoded, study_id_of
from trialflow.store.pareto import OBJECTIVES_ATTR, pareto_set


@dataclass(frozen=True)
class Objectives:
    """An experiment's objectives, every completed trial's values and its Pareto set."""

    objectives: list[dict[str, str]] = field(default_factory=list)
    values: dict[int, dict[str, float]] = field(default_factory=dict)  # trial index -> {metric: value}
    pareto: list[int] = field(default_factory=list)  # trial indexes, by the first objective best first

    @property
    def several(self) -> bool:
        return len(self.objectives) > 1

    def annotate(self, row: dict[str, Any]) -> dict[str, Any]:
        """A trial row with its ``values`` and whether it is in the Pareto set (several objectives)."""
        if self.several:
            row["values"] = self.values.get(row["trial_index"])
            row["pareto"] = row["trial_index"] in self._members
        return row

    @property
    def _members(self) -> set[int]:
        return set(self.pareto)

    def as_dict(self) -> dict[str, Any]:
        return {"objectives": self.objectives, "pareto": self.pareto}


def objectives_of(engine: Engine, experiment_id: str) -> Objectives:
    """The experiment's objectives and, when there are several, every trial's values and the set."""
    with engine.connect() as conn:
        sid = study_id_of(conn, experiment_id)
        raw = conn.execute(
            sa.select(STUDY_ATTRS.c.value_json).where(
                STUDY_ATTRS.c.study_id == sid, STUDY_ATTRS.c.key == OBJECTIVES_ATTR
            )
        ).scalar()
        objectives = decoded(raw) or []
        if len(objectives) < 2:
            return Objectives()
        rows = conn.execute(
            sa.select(TRIAL_INDEX.c.trial_index, VALUES.c.objective, VALUES.c.value)
            .select_from(
                TRIAL_INDEX.join(TRIALS, TRIALS.c.trial_id == TRIAL_INDEX.c.trial_id).join(
                    VALUES, VALUES.c.trial_id == TRIALS.c.trial_id
                )
            )
            .where(TRIAL_INDEX.c.study_id == sid, sa.cast(TRIALS.c.state, sa.String(8)) == "COMPLETE")
        ).all()
    names = [o["metric"] for o in objectives]
    by_trial: dict[int, list[float | None]] = {}
    for index, objective, value in rows:
        by_trial.setdefault(index, [None] * len(names))[objective] = value
    complete = {i: [float(x) for x in v if x is not None] for i, v in by_trial.items() if None not in v}
    indexes = sorted(complete)
    modes = [o["mode"] for o in objectives]
    members = [indexes[i] for i in pareto_set([complete[i] for i in indexes], modes)]
    sign = -1.0 if modes[0] == "maximize" else 1.0
    members.sort(key=lambda i: sign * complete[i][0])
    values = {i: dict(zip(names, v, strict=True)) for i, v in complete.items()}
    return Objectives(objectives, values, members)

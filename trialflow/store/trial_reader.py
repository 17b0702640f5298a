"""Optuna's trials read with plain SQL: the same FrozenTrials, a fraction of the cost.

Every tuner's ask reads the study's trials (TPE and GP every finished one). Optuna's
RDBStorage loads them as ORM objects, one per parameter, value and attribute row: with 1,000
finished trials that is ~11,000 objects and ~0.1 s per read, and an ask reads three times
(waiting trials, the search space, the sample). Here the same rows are read with six plain
SQL queries over the same tables and turned into the same FrozenTrials (each distinct
distribution's JSON decoded once). The store's storage (trialflow.store.optuna_storage),
the history window and the snapshot cache read through it; it is checked against Optuna's own
reader field for field (tests/store/test_optuna_storage.py).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import sqlalchemy as sa
from optuna import distributions
from optuna.trial import FrozenTrial, TrialState

from trialflow.store import statements
from trialflow.store.optuna_internals import models
from trialflow.store.optuna_tables import INTERMEDIATE, PARAMS, SYSTEM_ATTRS, TRIAL_ATTRS, TRIALS, VALUES

#: Up to this many trials, their related rows are read by the ids themselves (bound parameters,
#: far below SQLite's and PostgreSQL's limits); past it, by the selection as a subquery.
LITERAL_IDS = 2000


@lru_cache(maxsize=4096)
def distribution(distribution_json: str) -> distributions.BaseDistribution:
    """A study has a few distributions and many parameter rows: decode each JSON once."""
    return distributions.json_to_distribution(distribution_json)


def read_trials(
    conn: sa.Connection,
    where: list[Any],
    last_step_only: bool = False,
    user_attrs: bool = True,
    rows: Sequence[Any] | None = None,
) -> list[FrozenTrial]:
    """The trials matching ``where`` (conditions on the trials table), oldest first. For a
    tuner's window (trialflow.tuning.history): ``last_step_only`` keeps each trial's last
    intermediate value alone and ``user_attrs=False`` leaves out trialflow's attributes, the
    two things no tuner reads of a finished trial. ``rows``: the trials' own rows, where the
    caller read them already (statements.TRIALS_IN_STATES)."""
    # Sorted here, not in SQL: an ORDER BY trial_id made SQLite walk the study's index in id
    # order and test every trial's state, where the (study, state) index finds the few running
    # ones at once (~28 ms -> ~0 at 100,000 trials, three times per ask)
    if rows is None:
        rows = conn.execute(
            sa.select(
                TRIALS.c.trial_id,
                TRIALS.c.number,
                TRIALS.c.state,
                TRIALS.c.datetime_start,
                TRIALS.c.datetime_complete,
            ).where(*where)
        ).all()
    trials = sorted(rows, key=lambda row: row.trial_id)
    if not trials:
        return []
    # The trials' own rows name them: a few ids are given as they are, not as the selection again,
    # which each of the five reads below would evaluate once more (an ask at 100,000 finished
    # trials read its few unfinished ones by scanning the study's trials six times, three times
    # over: 340 ms of a TPE ask's 750, measured).
    ids: Any = (
        [row.trial_id for row in trials]
        if len(trials) <= LITERAL_IDS
        else sa.select(TRIALS.c.trial_id).where(*where).scalar_subquery()
    )
    params = _grouped(conn, PARAMS, ids, PARAMS.c.param_id)
    values = _grouped(conn, VALUES, ids, VALUES.c.objective)
    attrs = _grouped(conn, TRIAL_ATTRS, ids, TRIAL_ATTRS.c.trial_user_attribute_id) if user_attrs else {}
    system_attrs = _grouped(conn, SYSTEM_ATTRS, ids, SYSTEM_ATTRS.c.trial_system_attribute_id)
    intermediate = _grouped(conn, INTERMEDIATE, ids, INTERMEDIATE.c.step, last_step_only)
    return [
        _frozen(
            row,
            params.get(row.trial_id, ()),
            values.get(row.trial_id, ()),
            attrs.get(row.trial_id, ()),
            system_attrs.get(row.trial_id, ()),
            intermediate.get(row.trial_id, ()),
        )
        for row in trials
    ]


def _grouped(
    conn: sa.Connection, table: sa.Table, ids: Any, order: sa.Column[Any], last_only: bool = False
) -> dict[int, list[Any]]:
    out: dict[int, list[Any]] = defaultdict(list)
    query = sa.select(table).where(table.c.trial_id.in_(ids))
    if last_only:  # one index lookup per trial on (trial_id, step)
        inner = table.alias("later")
        last = sa.select(sa.func.max(inner.c[order.name])).where(inner.c.trial_id == table.c.trial_id)
        query = query.where(order == last.scalar_subquery())
    for row in conn.execute(query.order_by(table.c.trial_id, order)):
        out[row.trial_id].append(row)
    return out


def _frozen(
    trial: Any,
    params: Iterable[Any],
    values: Iterable[Any],
    user_attrs: Iterable[Any],
    system_attrs: Iterable[Any],
    intermediate: Iterable[Any],
) -> FrozenTrial:
    """One FrozenTrial, built exactly as RDBStorage._build_frozen_trial_from_trial_model does."""
    value_rows = list(values)
    decoded_values: list[float] | None = None
    if value_rows:
        decoded_values = [0.0] * len(value_rows)
        for v in value_rows:
            decoded_values[v.objective] = models.TrialValueModel.stored_repr_to_value(v.value, v.value_type)
    dists = {p.param_name: distribution(p.distribution_json) for p in params}
    return FrozenTrial(
        number=trial.number,
        state=trial.state,
        value=None,
        values=decoded_values,
        datetime_start=trial.datetime_start,
        datetime_complete=trial.datetime_complete,
        params={p.param_name: dists[p.param_name].to_external_repr(p.param_value) for p in params},
        distributions=dists,
        user_attrs={a.key: json.loads(a.value_json) for a in user_attrs},
        system_attrs={a.key: json.loads(a.value_json) for a in system_attrs},
        intermediate_values={
            v.step: models.TrialIntermediateValueModel.stored_repr_to_intermediate_value(
                v.intermediate_value, v.intermediate_value_type
            )
            for v in intermediate
        },
        trial_id=trial.trial_id,
    )


@dataclass(frozen=True)
class TrialSummary:
    """What trialflow's own record of a trial is made of (trialflow.store.records.TrialRecord):
    its row, its user attributes, and how many intermediate values it has up to which step,
    without the values themselves, its parameters' rows or its system attributes. Closing a
    trial and reading one back need no more: a FrozenTrial cost six statements and every
    intermediate value (a million, for a long trial) where this costs three."""

    trial_id: int
    number: int
    state: TrialState
    user_attrs: dict[str, Any]
    intermediate_count: int
    last_step: int | None
    #: Its experiment's study, where the read had it (a close reads the objectives by it).
    study_id: int | None = None

    @classmethod
    def of(cls, frozen: FrozenTrial, trial_id: int) -> TrialSummary:
        return cls(
            trial_id,
            frozen.number,
            frozen.state,
            dict(frozen.user_attrs),
            len(frozen.intermediate_values),
            frozen.last_step,
        )


def read_summary(conn: sa.Connection, trial_id: int) -> TrialSummary | None:
    """One trial's summary (None when there is no such trial), in three statements."""
    bound = {"b_trial": trial_id}
    row = conn.execute(statements.TRIAL_ROW, bound).first()
    if row is None:
        return None
    attrs = conn.execute(statements.TRIAL_ATTR_ROWS, bound).all()
    steps = conn.execute(statements.STEPS, bound).one()
    return TrialSummary(
        trial_id,
        row.number,
        TrialState(row.state),
        {a.key: json.loads(a.value_json) for a in attrs},
        int(steps[0]),
        None if steps[1] is None else int(steps[1]),
        int(row.study_id),
    )

"""The statements every trial's start, follow and close run, built once and bound per call.

SQLAlchemy spends several times longer building a statement than running it: a trial's lock
(``UPDATE trials ... WHERE trial_id = ? AND state IN (...)``) cost 225 us built at each call
against 43 us built once, and a plain ``SELECT`` on SQLite costs 10 us in the driver itself
(measured on this project's 2-core machine, 3,000 calls each). A trial's start and close run
some twenty such statements, in the triggerer's one process for every trial of every run, so
those are built here once, with named parameters (``b_*``: a column's own name is SQLAlchemy's
for an UPDATE's SET values), and the callers bind their values. A fixed list of states is an
``OR`` of equalities, not an ``IN``: a list bound as an ``IN`` is expanded into the SQL again
at every call (79 us against 43). A list that varies (attribute keys, trial indexes) is one
expanding parameter. What the statements mean is unchanged; the tests of the callers hold.
"""

from __future__ import annotations

import functools
from typing import Any

import sqlalchemy as sa
from optuna.trial import TrialState
from sqlalchemy.dialects import postgresql as postgresql_dialect
from sqlalchemy.dialects import sqlite as sqlite_dialect

from trialflow.store.optuna_tables import INTERMEDIATE, PARAMS, STUDIES, STUDY_ATTRS, TRIAL_ATTRS, TRIALS
from trialflow.store.tables import RESULT_TIMES, TRIAL_INDEX, TRIAL_QUEUE

#: The dialects whose INSERT ... ON CONFLICT DO UPDATE writes several attributes at once.
UPSERTS: dict[str, Any] = {
    "sqlite": sqlite_dialect.insert,
    "postgresql": postgresql_dialect.insert,
}


def _trial() -> sa.BindParameter[Any]:
    return sa.bindparam("b_trial")


def _study() -> sa.BindParameter[Any]:
    return sa.bindparam("b_study")


def _many(name: str) -> sa.BindParameter[Any]:
    return sa.bindparam(name, expanding=True)


_OPEN = sa.or_(TRIALS.c.state == TrialState.RUNNING, TRIALS.c.state == TrialState.WAITING)

# -- a trial's row (b_trial) ------------------------------------------------------------------
#: A no-op write guarded by the trial being unfinished: the check and the write lock at once.
LOCK_UNFINISHED = sa.update(TRIALS).where(TRIALS.c.trial_id == _trial(), _OPEN).values(state=TRIALS.c.state)
#: Bound with ``state``, ``datetime_complete`` (or ``number``): SET from the parameters given.
UPDATE_TRIAL = sa.update(TRIALS).where(TRIALS.c.trial_id == _trial())
TRIAL_STUDY_AND_STATE = sa.select(TRIALS.c.study_id, TRIALS.c.state).where(TRIALS.c.trial_id == _trial())
TRIAL_ROW = sa.select(TRIALS.c.number, TRIALS.c.state, TRIALS.c.study_id).where(TRIALS.c.trial_id == _trial())
TRIAL_ATTR_ROWS = (
    sa.select(TRIAL_ATTRS.c.key, TRIAL_ATTRS.c.value_json)
    .where(TRIAL_ATTRS.c.trial_id == _trial())
    .order_by(TRIAL_ATTRS.c.trial_user_attribute_id)
)
#: Bound with b_key too: the follow asks this at every look (was a stop asked?).
TRIAL_ATTR = sa.select(TRIAL_ATTRS.c.value_json).where(
    TRIAL_ATTRS.c.trial_id == _trial(), TRIAL_ATTRS.c.key == sa.bindparam("b_key")
)
#: Bound with b_keys too.
TRIAL_ATTRS_NAMED = sa.select(TRIAL_ATTRS.c.key, TRIAL_ATTRS.c.value_json).where(
    TRIAL_ATTRS.c.trial_id == _trial(), TRIAL_ATTRS.c.key.in_(_many("b_keys"))
)
STEPS = sa.select(sa.func.count(), sa.func.max(INTERMEDIATE.c.step)).where(INTERMEDIATE.c.trial_id == _trial())

# -- a new trial of a study (b_study) ---------------------------------------------------------
STUDY_EXISTS = sa.select(STUDIES.c.study_id).where(STUDIES.c.study_id == _study())
STUDY_LOCKED = STUDY_EXISTS.with_for_update()
#: Bound with the trial's columns (study_id, number, state, datetime_start).
INSERT_TRIAL = sa.insert(TRIALS)
#: Bound with b_study and b_trial: the study's trials before this one (Optuna's number).
TRIALS_BEFORE = sa.select(sa.func.count(TRIALS.c.trial_id)).where(
    TRIALS.c.study_id == _study(), TRIALS.c.trial_id < _trial()
)

#: Bound with b_states (expanding): the study's trials in those states, as read_trials reads them.
TRIALS_IN_STATES = sa.select(
    TRIALS.c.trial_id, TRIALS.c.number, TRIALS.c.state, TRIALS.c.datetime_start, TRIALS.c.datetime_complete
).where(TRIALS.c.study_id == _study(), TRIALS.c.state.in_(_many("b_states")))
#: Bound with b_names (expanding): one earlier parameter row of each name in the study (any
#: one: each was checked against the first when it was written).
_FIRST_OF_EACH_NAME = (
    sa.select(sa.func.min(PARAMS.c.param_id))
    .join(TRIALS, TRIALS.c.trial_id == PARAMS.c.trial_id)
    .where(TRIALS.c.study_id == _study(), PARAMS.c.param_name.in_(_many("b_names")))
    .group_by(PARAMS.c.param_name)
)
EARLIER_DISTRIBUTIONS = sa.select(PARAMS.c.param_name, PARAMS.c.distribution_json).where(
    PARAMS.c.param_id.in_(_FIRST_OF_EACH_NAME)
)
#: Bound with study_id, trial_index, trial_id: a trial's claim of its index.
INSERT_INDEX = sa.insert(TRIAL_INDEX)

# -- an experiment's attributes (b_study, b_keys; b_name) -------------------------------------
STUDY_ATTRS_NAMED = sa.select(STUDY_ATTRS.c.key, STUDY_ATTRS.c.value_json).where(
    STUDY_ATTRS.c.study_id == _study(), STUDY_ATTRS.c.key.in_(_many("b_keys"))
)
#: Bound with b_key: one attribute's stored JSON.
STUDY_ATTR = sa.select(STUDY_ATTRS.c.value_json).where(
    STUDY_ATTRS.c.study_id == _study(), STUDY_ATTRS.c.key == sa.bindparam("b_key")
)
#: Bound with b_key, b_old and value_json: a compare-and-set of one attribute.
SWAP_STUDY_ATTR = sa.update(STUDY_ATTRS).where(
    STUDY_ATTRS.c.study_id == _study(),
    STUDY_ATTRS.c.key == sa.bindparam("b_key"),
    STUDY_ATTRS.c.value_json == sa.bindparam("b_old"),
)
#: Bound with study_id, key, value_json.
INSERT_STUDY_ATTR = sa.insert(STUDY_ATTRS)
#: The study's id by its name, with the attributes named (none: one row of NULLs).
STUDY_WITH_ATTRS = (
    sa.select(STUDIES.c.study_id, STUDY_ATTRS.c.key, STUDY_ATTRS.c.value_json)
    .select_from(
        STUDIES.outerjoin(
            STUDY_ATTRS,
            sa.and_(STUDY_ATTRS.c.study_id == STUDIES.c.study_id, STUDY_ATTRS.c.key.in_(_many("b_keys"))),
        )
    )
    .where(STUDIES.c.study_name == sa.bindparam("b_name"))
)
#: Bound with b_first, b_end: the trials asked in a run's window of indexes, and their states.
ASKED_BETWEEN = (
    sa.select(TRIAL_INDEX.c.trial_index, TRIALS.c.state)
    .join(TRIALS, TRIALS.c.trial_id == TRIAL_INDEX.c.trial_id)
    .where(
        TRIAL_INDEX.c.study_id == _study(),
        TRIAL_INDEX.c.trial_index >= sa.bindparam("b_first"),
        TRIAL_INDEX.c.trial_index < sa.bindparam("b_end"),
    )
)
#: Bound with b_first, b_end and b_lowest: of the trials asked at indexes b_first .. b_end - 1,
#: those running and every one at b_lowest or above, with its state (what a look for free
#: slots needs: trialflow.lifecycle.start_slots.claim_many).
ASKED_FOR_LOOK = ASKED_BETWEEN.where(
    sa.or_(TRIALS.c.state == TrialState.RUNNING, TRIAL_INDEX.c.trial_index >= sa.bindparam("b_lowest"))
)
#: Bound with b_indexes (expanding): the trials asked at those indexes, with their state.
ASKED_AT = (
    sa.select(TRIAL_INDEX.c.trial_index, TRIALS.c.state)
    .join(TRIALS, TRIALS.c.trial_id == TRIAL_INDEX.c.trial_id)
    .where(TRIAL_INDEX.c.study_id == _study(), TRIAL_INDEX.c.trial_index.in_(_many("b_indexes")))
)
#: Bound with b_index: the storage id of one trial index.
TRIAL_AT = sa.select(TRIAL_INDEX.c.trial_id).where(
    TRIAL_INDEX.c.study_id == _study(), TRIAL_INDEX.c.trial_index == sa.bindparam("b_index")
)
#: Bound with b_index: whether the trial at one index is closed (no row: not asked).
CLOSED_AT = (
    sa.select(TRIALS.c.state != TrialState.RUNNING)
    .select_from(TRIAL_INDEX.join(TRIALS, TRIALS.c.trial_id == TRIAL_INDEX.c.trial_id))
    .where(TRIAL_INDEX.c.study_id == _study(), TRIAL_INDEX.c.trial_index == sa.bindparam("b_index"))
)
#: Bound with b_indexes (expanding): how many of those trials are closed.
CLOSED_AMONG = (
    sa.select(sa.func.count())
    .select_from(TRIAL_INDEX.join(TRIALS, TRIALS.c.trial_id == TRIAL_INDEX.c.trial_id))
    .where(
        TRIAL_INDEX.c.study_id == _study(),
        TRIAL_INDEX.c.trial_index.in_(_many("b_indexes")),
        TRIALS.c.state != TrialState.RUNNING,
    )
)
#: The trials at the trial indexes b_indexes of study b_study.
TRIALS_AT = sa.select(TRIAL_INDEX.c.trial_id).where(
    TRIAL_INDEX.c.study_id == _study(), TRIAL_INDEX.c.trial_index.in_(_many("b_indexes"))
)

# -- the queue of asked-for trials (b_study, b_index; b_seq) ----------------------------------
#: Its own claim first (a retry), then the oldest waiting.
QUEUED_FOR = (
    sa.select(TRIAL_QUEUE)
    .where(
        TRIAL_QUEUE.c.study_id == _study(),
        sa.or_(TRIAL_QUEUE.c.claimed_index == sa.bindparam("b_index"), TRIAL_QUEUE.c.claimed_index.is_(None)),
    )
    .order_by(TRIAL_QUEUE.c.claimed_index.is_(None), TRIAL_QUEUE.c.seq)
    .limit(1)
)
#: Bound with claimed_index: taken only if no other start took it meanwhile.
TAKE_QUEUED = sa.update(TRIAL_QUEUE).where(
    TRIAL_QUEUE.c.seq == sa.bindparam("b_seq"), TRIAL_QUEUE.c.claimed_index.is_(None)
)


@functools.cache
def attrs_upsert(dialect: str) -> Any:
    """A trial's user attributes written several at once (rows of trial_id, key, value_json),
    on ``dialect``, which must be one of UPSERTS."""
    insert = UPSERTS[dialect](TRIAL_ATTRS)
    return insert.on_conflict_do_update(
        index_elements=[TRIAL_ATTRS.c.trial_id, TRIAL_ATTRS.c.key],
        set_={"value_json": insert.excluded.value_json},
    )


@functools.cache
def attr_keep_first(dialect: str) -> Any:
    """A trial's user attribute inserted unless it has one (rows of trial_id, key, value_json)."""
    return UPSERTS[dialect](TRIAL_ATTRS).on_conflict_do_nothing(
        index_elements=[TRIAL_ATTRS.c.trial_id, TRIAL_ATTRS.c.key]
    )


@functools.cache
def intermediate_upsert(dialect: str) -> Any:
    """Intermediate values, a step stored again overwriting its own row (Optuna's row)."""
    insert = UPSERTS[dialect](INTERMEDIATE)
    return insert.on_conflict_do_update(
        index_elements=[INTERMEDIATE.c.trial_id, INTERMEDIATE.c.step],
        set_={
            "intermediate_value": insert.excluded.intermediate_value,
            "intermediate_value_type": insert.excluded.intermediate_value_type,
        },
    )


@functools.cache
def result_times_keep_first(dialect: str) -> Any:
    """When each step reached the store (rows of trial_id, step, reported_at); a step read
    again keeps its first time."""
    return UPSERTS[dialect](RESULT_TIMES).on_conflict_do_nothing(
        index_elements=[RESULT_TIMES.c.trial_id, RESULT_TIMES.c.step]
    )

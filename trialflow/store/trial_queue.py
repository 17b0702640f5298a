"""Trials a person asked for (chosen parameters, re-runs), waiting for the next trial index.

One row per asked-for trial. The next trial that starts claims the oldest unclaimed row with
one conditional UPDATE (``claimed_index IS NULL``), which the database settles between
processes that start trials at the same moment, on SQLite and PostgreSQL alike: a row runs
once. A retry of the trial that claimed it finds its own row again. Created when first used:
stores made before it simply have nothing queued.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from trialflow.store import statements
from trialflow.store.tables import TRIAL_QUEUE, create_table

_MISSING = (sa.exc.OperationalError, sa.exc.ProgrammingError)
#: Tries to claim before giving up for this trial (each loss means another trial took a row).
CLAIM_TRIES = 20
#: claimed_index of a row no trial will take (its parameters no longer fit, its experiment ended).
DROPPED = -1


@dataclass(frozen=True)
class Queued:
    seq: int
    parameters: dict[str, Any]
    request: dict[str, Any]


class QueueFull(Exception):
    """The experiment already has as many asked-for trials waiting as it may."""


def enqueue(
    engine: sa.Engine, study_id: int, parameters: dict[str, Any], request: dict[str, Any], most: int | None = None
) -> int:
    """Queue one trial; with ``most``, only while fewer than ``most`` wait (QueueFull else).

    The count is taken after the insert, in its transaction, over the rows queued before it:
    two people adding the last free place at once do not both get it on SQLite (one writer at a
    time); on PostgreSQL each sees only committed rows, so concurrent adds may pass by as many
    as arrive together, never by a queue's worth."""
    create_table(TRIAL_QUEUE, engine)
    q = TRIAL_QUEUE.c
    with engine.begin() as conn:
        result = conn.execute(
            sa.insert(TRIAL_QUEUE).values(
                study_id=study_id, parameters=json.dumps(parameters), request=json.dumps(request)
            )
        )
        key = result.inserted_primary_key
        assert key is not None
        seq = int(key[0])
        if most is not None:
            ahead = conn.execute(
                sa.select(sa.func.count()).select_from(TRIAL_QUEUE).where(_unclaimed(study_id), q.seq <= seq)
            ).scalar_one()
            if ahead > most:
                raise QueueFull(f"{ahead - 1} asked-for trials are waiting already")  # rolls the insert back
        return seq


def _unclaimed(study_id: int) -> sa.ColumnElement[bool]:
    q = TRIAL_QUEUE.c
    return sa.and_(q.study_id == study_id, q.claimed_index.is_(None))


def drop_waiting(engine: sa.Engine, study_id: int) -> int:
    """Drop every asked-for trial still waiting (its experiment ended); returns how many."""
    try:
        with engine.begin() as conn:
            update = sa.update(TRIAL_QUEUE).where(_unclaimed(study_id)).values(claimed_index=DROPPED)
            return int(conn.execute(update).rowcount)
    except _MISSING:
        return 0


def waiting_count(engine: sa.Engine, study_id: int) -> int:
    try:
        with engine.connect() as conn:
            count = sa.select(sa.func.count()).select_from(TRIAL_QUEUE).where(_unclaimed(study_id))
            return int(conn.execute(count).scalar_one())
    except _MISSING:
        return 0


def _row(row: Any) -> Queued:
    return Queued(int(row.seq), json.loads(row.parameters), json.loads(row.request))


def claim(engine: sa.Engine, study_id: int, trial_index: int) -> Queued | None:
    """The asked-for trial ``trial_index`` runs: the one it claimed before (a retry), or the
    oldest unclaimed one, or None. One statement when nobody asked for a trial (every start
    asks), and a write only to take one."""
    try:
        for _ in range(CLAIM_TRIES):
            with engine.connect() as conn:  # its own claim first, then the oldest waiting
                found = conn.execute(statements.QUEUED_FOR, {"b_study": study_id, "b_index": trial_index}).first()
            if found is None:
                return None
            if found.claimed_index == trial_index:
                return _row(found)
            with engine.begin() as conn:  # taken only if no other start took it meanwhile
                taken = conn.execute(
                    statements.TAKE_QUEUED, {"b_seq": found.seq, "claimed_index": trial_index}
                ).rowcount
            if taken == 1:
                return _row(found)
    except _MISSING:
        return None
    return None


def release(engine: sa.Engine, seq: int, dropped: bool = False) -> None:
    """Give a claimed row back (its trial index went to another attempt), or drop it."""
    with engine.begin() as conn:
        conn.execute(
            sa.update(TRIAL_QUEUE).where(TRIAL_QUEUE.c.seq == seq).values(claimed_index=DROPPED if dropped else None)
        )


def waiting(engine: sa.Engine, study_id: int) -> list[Queued]:
    """The asked-for trials no trial has taken yet, oldest first."""
    q = TRIAL_QUEUE.c
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                sa.select(TRIAL_QUEUE).where(q.study_id == study_id, q.claimed_index.is_(None)).order_by(q.seq)
            ).all()
    except _MISSING:
        return []
    return [_row(r) for r in rows]

"""The tracking outbox: what of each trial has reached MLflow, kept in the experiment store.

A tracking server that is down, slow or refusing must never fail or slow a trial, and what it
missed must reach it later, once. So nothing is queued as messages: the store already holds
every result, and this table holds, per run of the experiment (the experiment's own, each
trial's, each warm-start prior's), the MLflow run's id and what was sent (``Sent``). Whoever
syncs (trialflow.tracking.sync) compares the two and sends the difference, level-triggered, as
a Kubernetes controller does; a pass that fails half-way leaves the rows at what did arrive.

Two processes may sync one experiment at once (the run's watch, the end step, a trial's start
making its own run): a row's ``claimed_until`` lets one of them make a row's MLflow run, by a
conditional update the database decides, and the experiment's ``sync`` row lets one of them
make a pass. What a lost response leaves unsure (the server kept a run or a metric, the answer
never came) is settled on MLflow's side: a run is found by its ``trialflow.key`` tag before one
is made, and a metric sent again carries the same step and stamp, which MLflow's SQL stores keep
once.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, replace
from typing import Literal

import sqlalchemy as sa

from trialflow.store.tables import TRACKING, create_table

#: The row whose claim is the right to make a pass over the experiment.
SYNC_KEY = "sync"
#: Seconds a claim holds: longer than a pass may take, so a process that died lets go.
CLAIM_SECONDS = 120.0


Claim = Literal["new", "again"]
NEW: Claim = "new"
AGAIN: Claim = "again"


@dataclass(frozen=True)
class Sent:
    """What of one run has reached MLflow."""

    params: bool = False
    #: The last intermediate step sent (-1: none).
    last_step: int = -1
    final: bool = False
    #: The MLflow status it was ended with (None: still open there).
    ended: str | None = None
    #: The experiment's own row: its MLflow experiment's id (a trial's start then asks no more).
    experiment: str = ""
    #: A digest of the tags sent last (its status, best mark, links), and the status and best
    #: mark they said.
    tags: str = ""
    status: str = ""
    best: bool = False

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, raw: str | None) -> Sent:
        try:
            data = json.loads(raw or "{}")
            return cls(
                params=bool(data.get("params", False)),
                last_step=int(data.get("last_step", -1)),
                final=bool(data.get("final", False)),
                ended=data.get("ended") if isinstance(data.get("ended"), str) else None,
                experiment=str(data.get("experiment", "")),
                tags=str(data.get("tags", "")),
                status=str(data.get("status", "")),
                best=bool(data.get("best", False)),
            )
        except (ValueError, TypeError, AttributeError):
            return cls()

    def with_(self, **changes: object) -> Sent:
        return replace(self, **changes)  # type: ignore[arg-type]


@dataclass(frozen=True)
class OutboxRow:
    run_key: str
    run_id: str | None
    run_url: str | None
    sent: Sent


class Outbox:
    """The tracking rows of one experiment (its study id in the store)."""

    def __init__(self, engine: sa.Engine, study_id: int):
        self.engine, self.study_id = engine, study_id
        create_table(TRACKING, engine)

    def rows(self) -> dict[str, OutboxRow]:
        t = TRACKING
        query = sa.select(t.c.run_key, t.c.run_id, t.c.run_url, t.c.sent).where(t.c.study_id == self.study_id)
        with self.engine.connect() as conn:
            return {
                key: OutboxRow(key, run_id, url, Sent.from_json(sent)) for key, run_id, url, sent in conn.execute(query)
            }

    def claim(self, run_key: str, seconds: float = CLAIM_SECONDS) -> Claim | None:
        """Take the row's claim for ``seconds``: ``NEW`` when this made the row (nobody ever
        tried to make its run: none can be found), ``AGAIN`` when it was there; None while
        another process holds it."""
        t, now = TRACKING, time.time()
        with self.engine.begin() as conn:
            won = conn.execute(
                t.update()
                .where(t.c.study_id == self.study_id, t.c.run_key == run_key, t.c.claimed_until < now)
                .values(claimed_until=now + seconds, updated_at=now)
            ).rowcount
        if won:
            return AGAIN
        try:
            with self.engine.begin() as conn:
                conn.execute(
                    t.insert().values(
                        study_id=self.study_id,
                        run_key=run_key,
                        sent=Sent().to_json(),
                        claimed_until=now + seconds,
                        updated_at=now,
                    )
                )
            return NEW
        except sa.exc.IntegrityError:  # there, and held by another
            return None

    def release(self, run_key: str) -> None:
        t = TRACKING
        with self.engine.begin() as conn:
            conn.execute(
                t.update().where(t.c.study_id == self.study_id, t.c.run_key == run_key).values(claimed_until=0.0)
            )

    def made(self, run_key: str, run_id: str, run_url: str | None) -> None:
        """The row's MLflow run is ``run_id``; its claim is let go."""
        t = TRACKING
        with self.engine.begin() as conn:
            conn.execute(
                t.update()
                .where(t.c.study_id == self.study_id, t.c.run_key == run_key)
                .values(run_id=run_id, run_url=run_url, claimed_until=0.0, updated_at=time.time())
            )

    def sent(self, run_key: str, sent: Sent) -> None:
        t = TRACKING
        with self.engine.begin() as conn:
            conn.execute(
                t.update()
                .where(t.c.study_id == self.study_id, t.c.run_key == run_key)
                .values(sent=sent.to_json(), updated_at=time.time())
            )

    def run_ids(self) -> dict[str, str]:
        """Each row's MLflow run, where made."""
        return {key: row.run_id for key, row in self.rows().items() if row.run_id}

"""Trials that ended, read once: what the summary, the list and the charts know of every trial.

At 100,000 trials, reading each trial's state, NNI status, value and times costs ~1 s (0.3 s
of it in SQLite alone), and the summary, the list and the chart data each did it on every call.
But Optuna freezes a finished trial: its state, values and user attributes are never written
again (``check_trial_is_updatable``), and trialflow's index of trials is insert-only. So the
trials read *settled* (finished at least ``SETTLE_S`` ago) are kept per study, with their
tallies, and a later call reads only:

- the trials after the highest index read, and those in the gaps below it (trial tasks claim
  their indexes in any order: index 3 may be asked for after index 7, and a stopped run leaves
  its window's rest empty),
- the trials that were not settled then (running, waiting, or ended moments ago),
- the study's first trial, whose Optuna id and start are checked against the kept ones: a
  store replaced underneath (a study id reused after a delete, a database made again) is read
  whole again.

Level-triggered: nothing here is told that a trial changed; what might change is read again.
An NNI import writes a trial's own times just after closing it
(``ExperimentStore.set_trial_times``): the settling time keeps a read in between from keeping
the import's instant.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from trialflow.queries.tables import STATUSES, TRIAL_ATTRS, TRIAL_INDEX, TRIALS, VALUES, decoded, epoch

#: Seconds after its end before a finished trial is kept.
SETTLE_S = 60.0
#: Trials kept per process, all stores together (293 bytes each, measured with tracemalloc at
#: 100,000: ~73 MB at most); the least recently read studies are dropped past it.
KEPT_TRIALS = 250_000
#: Optuna states of a trial not yet ended.
LIVE_STATES = frozenset({"RUNNING", "WAITING"})
#: Trials re-read by index per study, and ranges of missing indexes; past either the study is
#: read whole again.
_IN_LIMIT = 500
_HOLE_LIMIT = 100


@dataclass(frozen=True, slots=True)
class TrialFacts:
    """What the summary, the list and the charts need of a trial, without its parameters."""

    index: int
    state: str  # Optuna's: COMPLETE, PRUNED, FAIL, RUNNING, WAITING
    status: str  # NNI's (WAITING when not set yet)
    value: float | None  # the first objective's value (Optuna keeps no infinity in the column)
    started: float | None  # epoch seconds
    ended: float | None

    @property
    def live(self) -> bool:
        return self.state in LIVE_STATES


@dataclass
class Tally:
    """Trials per NNI status, the first start and the last end, and the lowest and highest
    value among completed trials: what the list and the summary show of an experiment."""

    counts: dict[str, int] = field(default_factory=dict)
    started: float | None = None
    ended: float | None = None
    low: float | None = None
    high: float | None = None

    def add(self, trial: TrialFacts) -> None:
        self.counts[trial.status] = self.counts.get(trial.status, 0) + 1
        if trial.started is not None and (self.started is None or trial.started < self.started):
            self.started = trial.started
        if trial.ended is not None and (self.ended is None or trial.ended > self.ended):
            self.ended = trial.ended
        if trial.state == "COMPLETE" and trial.value is not None:
            self.low = trial.value if self.low is None else min(self.low, trial.value)
            self.high = trial.value if self.high is None else max(self.high, trial.value)

    def with_trials(self, trials: Iterable[TrialFacts]) -> Tally:
        out = Tally(dict(self.counts), self.started, self.ended, self.low, self.high)
        for trial in trials:
            out.add(trial)
        return out


@dataclass
class StudyTrials:
    """One study's trials: those kept settled, with their tally, and those read this time."""

    settled: dict[int, TrialFacts] = field(default_factory=dict)
    tally: Tally = field(default_factory=Tally)
    highest: int = -1
    unsettled: list[TrialFacts] = field(default_factory=list)
    mark: tuple[Any, ...] | None = None  # the first trial's (index, Optuna id, start)
    holes: list[tuple[int, int]] = field(default_factory=list)  # index ranges below ``highest`` read empty
    #: values kept per settled trial for one use each (trialflow.queries.kept_table), by name
    columns: dict[str, dict[int, Any]] = field(default_factory=dict)

    def find_holes(self) -> None:
        """The ranges of indexes below the highest that no trial holds yet."""
        present = sorted([*self.settled, *(t.index for t in self.unsettled)])
        self.holes = [(a + 1, b - 1) for a, b in zip([-1, *present], present, strict=False) if b - a > 1]

    def trials(self) -> list[TrialFacts]:
        return [*self.settled.values(), *self.unsettled]

    def whole_tally(self) -> Tally:
        return self.tally.with_trials(self.unsettled)

    @property
    def size(self) -> int:
        return len(self.settled) + len(self.unsettled)


class _Kept:
    """The studies kept for one store, least recently read first."""

    def __init__(self) -> None:
        self.lock = threading.Lock()  # one reader of a store at a time: the next one reads little
        self.studies: dict[int, StudyTrials] = {}


_stores: dict[str, _Kept] = {}
_stores_lock = threading.Lock()
#: One string object per NNI status name, not one per trial (a name no status has, as a
#: hand-edited store may hold, is kept as read).
_STATUS_NAMES: dict[str, str] = {name: name for name in STATUSES}


def _kept(engine: Engine) -> _Kept:
    with _stores_lock:
        return _stores.setdefault(str(engine.url), _Kept())


def _facts_query() -> sa.Select:
    status = TRIAL_ATTRS.alias("st")
    return sa.select(
        TRIAL_INDEX.c.study_id,
        TRIAL_INDEX.c.trial_index,
        sa.cast(TRIALS.c.state, sa.String(8)),  # the name, as the facts keep it
        status.c.value_json,
        VALUES.c.value,
        TRIALS.c.datetime_start,
        TRIALS.c.datetime_complete,
        TRIALS.c.trial_id,
    ).select_from(
        TRIAL_INDEX.join(TRIALS, TRIALS.c.trial_id == TRIAL_INDEX.c.trial_id)
        .outerjoin(VALUES, sa.and_(VALUES.c.trial_id == TRIALS.c.trial_id, VALUES.c.objective == 0))
        .outerjoin(status, sa.and_(status.c.trial_id == TRIALS.c.trial_id, status.c.key == "nni_status"))
    )


def _status_name(raw: Any) -> str:
    name = decoded(raw)
    text = name if isinstance(name, str) and name else "WAITING"
    return _STATUS_NAMES.get(text, text)


def study_trials(engine: Engine, study_ids: Sequence[int], now: float) -> dict[int, StudyTrials]:
    """Every trial of each study in ``study_ids`` (see the module for what is read again)."""
    kept = _kept(engine)
    with kept.lock:
        # taken out while read: a read that fails leaves nothing half-updated behind (the studies
        # are read whole next time)
        known = {sid: kept.studies.pop(sid) for sid in study_ids if sid in kept.studies}
        whole = [sid for sid in study_ids if sid not in known]
        clauses: list[tuple[int, sa.ColumnElement[bool]]] = []
        queried: dict[int, StudyTrials] = {}
        for sid, study in known.items():
            if len(study.unsettled) > _IN_LIMIT or len(study.holes) > _HOLE_LIMIT or study.mark is None:
                whole.append(sid)
                continue
            queried[sid] = study
            wanted = [
                TRIAL_INDEX.c.trial_index > study.highest,
                TRIAL_INDEX.c.trial_index.in_([t.index for t in study.unsettled] + [study.mark[0]]),
                *(TRIAL_INDEX.c.trial_index.between(low, high) for low, high in study.holes),
            ]
            clauses.append(
                (
                    len(study.unsettled) + 3 + 2 * len(study.holes),
                    sa.and_(TRIAL_INDEX.c.study_id == sid, sa.or_(*wanted)),
                )
            )
        rows: list[sa.Row] = []
        with engine.connect() as conn:
            for batch in _batches(clauses):
                rows.extend(conn.execute(_facts_query().where(sa.or_(*batch))).all())
            replaced = _replaced(queried, rows)
            whole.extend(replaced)
            fresh = {sid: StudyTrials() for sid in whole}
            if whole:
                rows = [r for r in rows if r[0] not in replaced]
                rows.extend(conn.execute(_facts_query().where(TRIAL_INDEX.c.study_id.in_(whole))).all())
        studies = {**{sid: s for sid, s in known.items() if sid not in fresh}, **fresh}
        before = {sid: {t.index for t in study.unsettled} for sid, study in studies.items()}
        grown: set[int] = set(fresh)
        for study in studies.values():
            study.unsettled = []
        for sid, index, state, raw_status, value, begun, done, trial_id in rows:
            study = studies[sid]
            if index in study.settled:
                continue  # the first trial, read again to check the mark
            if index not in before[sid]:
                grown.add(sid)  # a trial not known before: the gaps move
            trial = TrialFacts(index, str(state), _status_name(raw_status), value, epoch(begun), epoch(done))
            if study.mark is None or index < study.mark[0]:
                study.mark = (index, trial_id, begun)
            if not trial.live and (trial.ended is None or trial.ended <= now - SETTLE_S):
                study.settled[index] = trial
                study.tally.add(trial)
            else:
                study.unsettled.append(trial)
            study.highest = max(study.highest, index)
        for sid in grown:
            studies[sid].find_holes()
        for sid in study_ids:
            kept.studies.pop(sid, None)
            kept.studies[sid] = studies[sid]  # most recently read last
        _forget_least_recent(kept)
    return studies


def sql_tallies(engine: Engine, study_ids: Sequence[int]) -> dict[int, Tally]:
    """The tallies of ``study_ids`` in two SQL aggregates, keeping nothing: for a process that
    reads an experiment once (a command), where building every trial's facts to keep them
    (1.2-1.5 s at 100,000) costs more than the aggregates (~0.3 s). The same tallies as
    study_trials' (a test compares them): only indexed trials count, a status that is not a
    name is WAITING's, the lowest and highest value are completed trials'."""
    if not study_ids:
        return {}
    status = TRIAL_ATTRS.alias("st")
    indexed = TRIALS.join(TRIAL_INDEX, TRIAL_INDEX.c.trial_id == TRIALS.c.trial_id)
    counted = (
        sa.select(TRIAL_INDEX.c.study_id, status.c.value_json, sa.func.count())
        .select_from(
            indexed.outerjoin(status, sa.and_(status.c.trial_id == TRIALS.c.trial_id, status.c.key == "nni_status"))
        )
        .where(TRIAL_INDEX.c.study_id.in_(list(study_ids)))  # through the index's key: SQLite plans it well so
        .group_by(TRIAL_INDEX.c.study_id, status.c.value_json)
    )
    completed = sa.and_(
        VALUES.c.trial_id == TRIALS.c.trial_id,
        VALUES.c.objective == 0,
        sa.cast(TRIALS.c.state, sa.String(8)) == "COMPLETE",
    )
    spans = (
        sa.select(
            TRIAL_INDEX.c.study_id,
            sa.func.min(TRIALS.c.datetime_start),
            sa.func.max(TRIALS.c.datetime_complete),
            sa.func.min(VALUES.c.value),
            sa.func.max(VALUES.c.value),
        )
        .select_from(indexed.outerjoin(VALUES, completed))
        .where(TRIAL_INDEX.c.study_id.in_(list(study_ids)))
        .group_by(TRIAL_INDEX.c.study_id)
    )
    tallies = {sid: Tally() for sid in study_ids}
    with engine.connect() as conn:
        for sid, raw, count in conn.execute(counted):
            name = _status_name(raw)
            tallies[sid].counts[name] = tallies[sid].counts.get(name, 0) + int(count)
        for sid, started, ended, low, high in conn.execute(spans):
            tally = tallies[sid]
            tally.started, tally.ended, tally.low, tally.high = epoch(started), epoch(ended), low, high
    return tallies


#: A column's values are read for these many trials by index at most; more are read whole.
_COLUMN_IN_LIMIT = 1000
#: Column values kept per process, all stores together (230-280 bytes each measured at 100,000:
#: a parameter's sort key, a trial's searched text; ~70 MB at most).
KEPT_COLUMN_VALUES = 250_000
#: Columns kept per study (the least recently used dropped first): a sorted parameter or two
#: and the searched text.
COLUMNS_PER_STUDY = 3

#: What a column reads: (connection, study id, the trial indexes or None for every trial) to
#: each trial's value by index.
ColumnReader = Callable[[sa.Connection, int, "Sequence[int] | None"], dict[int, Any]]


def kept_column(engine: Engine, sid: int, study: StudyTrials, name: str, read: ColumnReader) -> dict[int, Any]:
    """Column ``name`` of every trial of ``study`` (as study_trials just returned it): kept for
    its settled trials (a settled trial's parameters and attributes never change), read for
    those settled since it was last asked for and for every unsettled trial.

    A column lives and dies with its study's kept trials (a store replaced underneath is read
    whole into a new StudyTrials, without columns); at most KEPT_COLUMN_VALUES are kept."""
    kept = _kept(engine)
    with kept.lock:
        column = study.columns.pop(name, None)
        if column is None:
            column = {}
        while len(study.columns) >= COLUMNS_PER_STUDY:  # the least recently used first
            study.columns.pop(next(iter(study.columns)))
        settled = list(study.settled)
        missing = [i for i in settled if i not in column]
        live = [t.index for t in study.unsettled]
        wanted = missing + live
        fresh: dict[int, Any] = {}
        if wanted:
            with engine.connect() as conn:
                if len(wanted) > _COLUMN_IN_LIMIT:
                    fresh = read(conn, sid, None)  # the whole study: one statement
                else:
                    for start in range(0, len(wanted), _IN_LIMIT):
                        fresh.update(read(conn, sid, wanted[start : start + _IN_LIMIT]))
        for index in missing:
            column[index] = fresh.get(index)
        study.columns[name] = column  # most recently used last
        _forget_columns(kept, study, name)
        return {**column, **{i: fresh.get(i) for i in live}}


def _forget_columns(kept: _Kept, study: StudyTrials, name: str) -> None:
    """Columns past KEPT_COLUMN_VALUES dropped, the least recently read studies' first (the
    column just used last, and itself dropped when it alone is past)."""
    total = sum(len(c) for s in kept.studies.values() for c in s.columns.values())
    for other in [*kept.studies.values(), study]:
        for column in list(other.columns):
            if total <= KEPT_COLUMN_VALUES:
                return
            if other is study and column == name:
                continue
            total -= len(other.columns.pop(column))
    if total > KEPT_COLUMN_VALUES:
        study.columns.pop(name, None)


def _batches(clauses: Sequence[tuple[int, sa.ColumnElement[bool]]]) -> Iterable[list[sa.ColumnElement[bool]]]:
    """The clauses in statements of at most ~5,000 bound parameters and 100 terms (SQLite's
    limits on both are far above; a statement stays small to plan)."""
    batch: list[sa.ColumnElement[bool]] = []
    weight = 0
    for cost, clause in clauses:
        if batch and (weight + cost > 5000 or len(batch) >= 100):
            yield batch
            batch, weight = [], 0
        batch.append(clause)
        weight += cost
    if batch:
        yield batch


def _replaced(known: dict[int, StudyTrials], rows: Sequence[sa.Row]) -> list[int]:
    """The studies of ``known`` (each read for what changed, its first trial too) whose first
    trial is not the one kept, or is gone."""
    seen: dict[int, tuple[Any, ...]] = {}
    for sid, index, _, _, _, begun, _, trial_id in rows:
        mark = known[sid].mark if sid in known else None
        if mark is not None and index == mark[0]:
            seen[sid] = (index, trial_id, begun)
    return [sid for sid, study in known.items() if study.mark is not None and seen.get(sid) != study.mark]


def _forget_least_recent(kept: _Kept) -> None:
    total = sum(s.size for s in kept.studies.values())
    for sid in list(kept.studies):
        if total <= KEPT_TRIALS or len(kept.studies) == 1:
            break
        total -= kept.studies.pop(sid).size

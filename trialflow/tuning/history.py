"""What a tuner sees of a long experiment's history when it asks: a bounded window.

An experiment that runs for months (``scheduledRuns: continue``, no trial limit) reaches
tens of thousands of finished trials, and every trial task is a new process that asks once.
Reading every finished trial to ask for one more cost 0.6 s (Random) to 1.8 s (GP) at 20,000
(bench/tuners.py), most of it building 20,000 FrozenTrials the tuner then mostly ignores:
TPE splits them into its 25 best and the rest, Anneal draws near its few best, GP fits 300.

So past ``HISTORY_LIMIT`` finished trials, an ask reads a window instead (one SQL selection,
then the plain-SQL reader on those trials only):

* tuners that learn from results (TPE and BOHB, Anneal, GP) see the ``HISTORY_LIMIT // 2``
  best and the ``HISTORY_LIMIT // 2`` newest finished trials (their parameters, values and
  last intermediate result, which is what TPE and Anneal read of an early-stopped trial;
  not trialflow's own attributes, which no tuner reads), plus every unfinished trial;
* tuners that draw without looking (Random, Hyperband's, GridSearch's and BatchTuner's index
  sampler) see the unfinished trials only;
* Evolution (NSGA-II, whose generations refer to each other's trial ids) and experiments with
  several objectives (no single "best") keep reading everything.

Below the limit nothing changes: the ask goes through the process's cache of every trial
(trialflow.store.snapshot), as before. The docs' tuner table (docs/reference/algorithms.md)
says which tuners are bounded.

Finding the window is itself a read of every trial (the best half is a sort of every
completed trial's value: ~70 ms at 100,000, in every trial task), so the window is kept in the
store, one row per study (``trialflow_history_windows``), as the snapshot row keeps the full
cache: the window's trials, the highest trial id it accounts for, how many trials there were
up to it and which of them had not finished. A finished trial never changes, so a trial the
row left out (worse than its best half, older than its newest half) never enters the window
again, and an ask reads only the row, the trials after its id and the ones unfinished then.
The count is checked on every ask: a trial that appears below the id later (PostgreSQL may
commit a lower id after a higher one) or a study id reused after a deletion changes it, and
the window is then found whole again. The row is written again once ``WINDOW_STEP`` trials
finished after it.
"""

from __future__ import annotations

import json
import math
import zlib
from collections.abc import Container, Iterable
from dataclasses import dataclass

import sqlalchemy as sa
from optuna.storages import RDBStorage
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

from trialflow.limits import HISTORY_LIMIT
from trialflow.store.optuna_internals import CachedStorage
from trialflow.store.optuna_tables import TRIALS, VALUES
from trialflow.store.snapshot import (
    SNAPSHOT_STEP,
    checked_row,
    count_upto,
    decode_trials,
    encode_trials,
    save_forward,
)
from trialflow.store.tables import WINDOWS
from trialflow.store.trial_reader import read_trials
from trialflow.tuning.algorithms import CATALOGUE

#: Tuners (trialflow's canonical names) that learn from the window, and that ignore history:
#: the algorithm catalogue says which (the docs' tuner table (docs/reference/algorithms.md) is generated from it).
WINDOWED = frozenset(s.name for s in CATALOGUE if s.history == "window")
BLIND = frozenset(s.name for s in CATALOGUE if s.history == "none")

_FINISHED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
_UNFINISHED = (TrialState.RUNNING, TrialState.WAITING)

#: Finished trials after a window row before an ask writes it again.
WINDOW_STEP = SNAPSHOT_STEP
#: Unfinished trials below a row's id it keeps at most (more: the window is found whole each ask).
_UNFINISHED_KEPT = 500
_FORMAT = 1


def finished_count(engine: sa.Engine, study_id: int) -> int:
    with engine.connect() as conn:
        return int(
            conn.execute(
                sa.select(sa.func.count())
                .select_from(TRIALS)
                .where(TRIALS.c.study_id == study_id, TRIALS.c.state.in_(_FINISHED))
            ).scalar()
            or 0
        )


def window_ids(
    conn: sa.Connection, study_id: int, direction: StudyDirection, limit: int = HISTORY_LIMIT, upto: int | None = None
) -> list[int]:
    """The storage ids of the ``limit // 2`` best complete trials (by the first objective) and
    the ``limit // 2`` newest finished ones (complete or early-stopped), oldest first; only
    trials with ids up to ``upto`` when given."""
    half = max(1, limit // 2)
    value = VALUES.c.value
    below = [] if upto is None else [TRIALS.c.trial_id <= upto]
    best = conn.execute(
        sa.select(TRIALS.c.trial_id)
        .join(VALUES, sa.and_(VALUES.c.trial_id == TRIALS.c.trial_id, VALUES.c.objective == 0))
        .where(TRIALS.c.study_id == study_id, TRIALS.c.state == TrialState.COMPLETE, value.is_not(None), *below)
        .order_by(value.desc() if direction == StudyDirection.MAXIMIZE else value.asc(), TRIALS.c.trial_id)
        .limit(half)
    ).scalars()
    newest = conn.execute(
        sa.select(TRIALS.c.trial_id)
        .where(TRIALS.c.study_id == study_id, TRIALS.c.state.in_((TrialState.COMPLETE, TrialState.PRUNED)), *below)
        .order_by(TRIALS.c.trial_id.desc())
        .limit(half)
    ).scalars()
    return sorted({*best, *newest})


def select_window(trials: Iterable[FrozenTrial], direction: StudyDirection, limit: int) -> list[FrozenTrial]:
    """window_ids' choice among ``trials`` (the same order: value, then id; a value Optuna keeps
    as no number, an infinity, is never among the best), oldest first."""
    half = max(1, limit // 2)
    pool = {t._trial_id: t for t in trials}
    sign = -1.0 if direction == StudyDirection.MAXIMIZE else 1.0
    complete = [
        t
        for t in pool.values()
        if t.state == TrialState.COMPLETE and t.values and t.values[0] is not None and math.isfinite(t.values[0])
    ]
    best = sorted(complete, key=lambda t: (sign * t.values[0], t._trial_id))[:half]
    stopped_or_complete = [t for t in pool.values() if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]
    newest = sorted(stopped_or_complete, key=lambda t: t._trial_id, reverse=True)[:half]
    return sorted({t._trial_id: t for t in best + newest}.values(), key=lambda t: t._trial_id)


@dataclass(frozen=True)
class KeptWindow:
    """A study's window as of ``last``: ``count`` trials had ids up to it, ``unfinished`` of
    them had not finished, and ``trials`` is the window among the others."""

    last: int
    count: int
    unfinished: frozenset[int]
    trials: list[FrozenTrial]


def _encode(kept: KeptWindow, direction: StudyDirection, limit: int) -> bytes:
    body = {
        "format": _FORMAT,
        "limit": limit,
        "direction": direction.name,
        "unfinished": sorted(kept.unfinished),
        "trials": encode_trials(kept.trials),
    }
    return zlib.compress(json.dumps(body, separators=(",", ":")).encode(), 1)


def load_window(engine: sa.Engine, study_id: int, direction: StudyDirection, limit: int) -> KeptWindow | None:
    """The study's kept window when it still accounts for every trial up to its id (None: no
    row, another Optuna, limit or direction, or the count moved: snapshot.checked_row)."""
    row = checked_row(engine, WINDOWS, study_id, WINDOWS.c.last_trial_id)
    if row is None:
        return None
    try:
        body = json.loads(zlib.decompress(row.payload))
        if (body.get("format"), body.get("limit"), body.get("direction")) != (_FORMAT, limit, direction.name):
            return None
        return KeptWindow(
            row.last_trial_id, row.trial_count, frozenset(body["unfinished"]), decode_trials(body["trials"])
        )
    except (ValueError, KeyError, TypeError, zlib.error):
        return None


def _save(engine: sa.Engine, study_id: int, kept: KeptWindow, payload: bytes) -> None:
    """Store the row unless a newer one is there; one as new is replaced (a row of the same id
    whose count moved is made again)."""
    values = {"last_trial_id": kept.last, "trial_count": kept.count, "payload": payload}
    try:
        save_forward(engine, WINDOWS, study_id, WINDOWS.c.last_trial_id, values, replace_equal=True)
    except sa.exc.DBAPIError:
        pass  # a cache: the next ask finds the window whole instead


def _finished_after(conn: sa.Connection, study_id: int, kept: KeptWindow, upto: int | None = None) -> list[FrozenTrial]:
    """The finished trials the row has not seen: after its id, or unfinished then."""
    seen_later = TRIALS.c.trial_id > kept.last
    if kept.unfinished:
        seen_later = sa.or_(seen_later, TRIALS.c.trial_id.in_(sorted(kept.unfinished)))
    where = [TRIALS.c.study_id == study_id, TRIALS.c.state.in_(_FINISHED), seen_later]
    if upto is not None:
        where.append(TRIALS.c.trial_id <= upto)
    return read_trials(conn, where, last_step_only=True, user_attrs=False)


def _made(
    conn: sa.Connection, study_id: int, direction: StudyDirection, limit: int, base: KeptWindow | None
) -> KeptWindow | None:
    """A row as of now: the highest id, then how many trials are up to it, then which of them
    are unfinished, then the window among the finished ones (in that order, a trial finishing
    meanwhile is in both, never in neither). From ``base``, only what it has not seen is read."""
    last = conn.execute(sa.select(sa.func.max(TRIALS.c.trial_id)).where(TRIALS.c.study_id == study_id)).scalar()
    if last is None:
        return None
    if base is not None and count_upto(conn, study_id, base.last) != base.count:
        base = None  # a trial appeared below the base's id since it was checked: found whole
    count = count_upto(conn, study_id, last)
    unfinished = frozenset(
        conn.execute(
            sa.select(TRIALS.c.trial_id).where(
                TRIALS.c.study_id == study_id, TRIALS.c.state.in_(_UNFINISHED), TRIALS.c.trial_id <= last
            )
        ).scalars()
    )
    if len(unfinished) > _UNFINISHED_KEPT:
        return None
    if base is None:
        ids = window_ids(conn, study_id, direction, limit, upto=last)
        trials = read_trials(conn, [TRIALS.c.trial_id.in_(ids)], last_step_only=True, user_attrs=False)
    else:
        trials = select_window([*base.trials, *_finished_after(conn, study_id, base, upto=last)], direction, limit)
    return KeptWindow(int(last), count, unfinished, trials)


def window_trials(
    engine: sa.Engine, study_id: int, direction: StudyDirection, limit: int, kept: KeptWindow | None = None
) -> list[FrozenTrial]:
    """The window of ``study_id``'s finished trials as of now, from its kept row (``kept``, or
    read), made and kept when there is none or once WINDOW_STEP trials finished after it."""
    kept = kept if kept is not None else load_window(engine, study_id, direction, limit)
    with engine.connect() as conn:
        if kept is None:
            made = _made(conn, study_id, direction, limit, None)
            if made is None:  # no trial, or too many left unfinished to keep: found whole
                ids = window_ids(conn, study_id, direction, limit)
                return read_trials(conn, [TRIALS.c.trial_id.in_(ids)], last_step_only=True, user_attrs=False)
            kept, due = made, True
            later = _finished_after(conn, study_id, kept)
        else:
            later = _finished_after(conn, study_id, kept)
            due = sum(1 for t in later if t._trial_id > kept.last) >= WINDOW_STEP
            if due:
                made = _made(conn, study_id, direction, limit, kept)
                due = made is not None
                kept = made or kept
    if due:
        _save(engine, study_id, kept, _encode(kept, direction, limit))
    return select_window([*kept.trials, *later], direction, limit)


class HistoryWindow(CachedStorage):
    """The storage one ask reads through when the experiment is past the limit: Optuna's cache
    for everything else (the trial being created, its parameters), a window for trial lists."""

    def __init__(self, backend: RDBStorage, learns: bool, limit: int = HISTORY_LIMIT, kept: KeptWindow | None = None):
        super().__init__(backend)
        self._backend = backend
        self._learns = learns
        self._limit = limit
        self._kept = kept
        self._windows: dict[int, list[FrozenTrial]] = {}

    def get_all_trials(
        self, study_id: int, deepcopy: bool = True, states: Container[TrialState] | None = None
    ) -> list[FrozenTrial]:
        every = (*_FINISHED, *_UNFINISHED)
        wanted = [s for s in every if s in states] if states is not None else list(every)
        # Unfinished trials change while the ask runs (the new one is RUNNING): read them each time.
        unfinished = [s for s in wanted if s in _UNFINISHED]
        out = self._backend.get_all_trials(study_id, deepcopy=False, states=unfinished) if unfinished else []
        if self._learns and any(s in _FINISHED for s in wanted):
            if study_id not in self._windows:
                direction = self._backend.get_study_directions(study_id)[0]
                self._windows[study_id] = window_trials(
                    self._backend.engine, study_id, direction, self._limit, self._kept
                )
            out += [t for t in self._windows[study_id] if t.state in wanted]
        return sorted(out, key=lambda t: t.number)


def asking_storage(cache: CachedStorage, backend: RDBStorage, study_id: int, tuner: str) -> CachedStorage:
    """The storage an ask should read through: the process's full cache, or a window when the
    experiment is past the limit and ``tuner`` (canonical name) is one a window serves (a
    study with a kept window is past it: finished trials stay finished). A tuner that draws
    without looking reads no finished trial at any size, and not through the process's cache:
    that cache is one lock for every ask of the process, held while it reads back every trial
    still running (fifty, in the triggerer that starts fifty at once: bench/RESULTS.md)."""
    if tuner in BLIND:
        return HistoryWindow(backend, learns=False, limit=HISTORY_LIMIT)
    if tuner not in WINDOWED:
        return cache
    directions = backend.get_study_directions(study_id)
    if len(directions) > 1:
        return cache
    if tuner in WINDOWED:
        kept = load_window(backend.engine, study_id, directions[0], HISTORY_LIMIT)
        if kept is not None:
            return HistoryWindow(backend, learns=True, limit=HISTORY_LIMIT, kept=kept)
    if finished_count(backend.engine, study_id) <= HISTORY_LIMIT:
        return cache
    return HistoryWindow(backend, learns=True, limit=HISTORY_LIMIT)

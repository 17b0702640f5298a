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
(trialflow.tuning.snapshot), as before. README's tuner table says which tuners are bounded.
"""

from __future__ import annotations

from collections.abc import Container

import sqlalchemy as sa
from optuna.storages import RDBStorage
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

from trialflow.limits import HISTORY_LIMIT
from trialflow.tuning.algorithms import CATALOGUE
from trialflow.tuning.optuna_internals import CachedStorage, models
from trialflow.tuning.trial_reader import read_trials

#: Tuners (trialflow's canonical names) that learn from the window, and that ignore history:
#: the algorithm catalogue says which (README's tuner table is generated from it).
WINDOWED = frozenset(s.name for s in CATALOGUE if s.history == "window")
BLIND = frozenset(s.name for s in CATALOGUE if s.history == "none")

_TRIALS = models.TrialModel.__table__
_VALUES = models.TrialValueModel.__table__
_FINISHED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
_UNFINISHED = (TrialState.RUNNING, TrialState.WAITING)


def finished_count(engine: sa.Engine, study_id: int) -> int:
    with engine.connect() as conn:
        return int(
            conn.execute(
                sa.select(sa.func.count())
                .select_from(_TRIALS)
                .where(_TRIALS.c.study_id == study_id, _TRIALS.c.state.in_(_FINISHED))
            ).scalar()
            or 0
        )


def window_ids(conn: sa.Connection, study_id: int, direction: StudyDirection, limit: int = HISTORY_LIMIT) -> list[int]:
    """The storage ids of the ``limit // 2`` best complete trials (by the first objective) and
    the ``limit // 2`` newest finished ones (complete or early-stopped), oldest first."""
    half = max(1, limit // 2)
    value = _VALUES.c.value
    best = conn.execute(
        sa.select(_TRIALS.c.trial_id)
        .join(_VALUES, sa.and_(_VALUES.c.trial_id == _TRIALS.c.trial_id, _VALUES.c.objective == 0))
        .where(_TRIALS.c.study_id == study_id, _TRIALS.c.state == TrialState.COMPLETE, value.is_not(None))
        .order_by(value.desc() if direction == StudyDirection.MAXIMIZE else value.asc(), _TRIALS.c.trial_id)
        .limit(half)
    ).scalars()
    newest = conn.execute(
        sa.select(_TRIALS.c.trial_id)
        .where(_TRIALS.c.study_id == study_id, _TRIALS.c.state.in_((TrialState.COMPLETE, TrialState.PRUNED)))
        .order_by(_TRIALS.c.trial_id.desc())
        .limit(half)
    ).scalars()
    return sorted({*best, *newest})


class HistoryWindow(CachedStorage):
    """The storage one ask reads through when the experiment is past the limit: Optuna's cache
    for everything else (the trial being created, its parameters), a window for trial lists."""

    def __init__(self, backend: RDBStorage, learns: bool, limit: int = HISTORY_LIMIT):
        super().__init__(backend)
        self._backend = backend
        self._learns = learns
        self._limit = limit
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
                with self._backend.engine.connect() as conn:
                    ids = window_ids(conn, study_id, direction, self._limit)
                    self._windows[study_id] = read_trials(
                        conn, [_TRIALS.c.trial_id.in_(ids)], last_step_only=True, user_attrs=False
                    )
            out += [t for t in self._windows[study_id] if t.state in wanted]
        return sorted(out, key=lambda t: t.number)


def asking_storage(cache: CachedStorage, backend: RDBStorage, study_id: int, tuner: str) -> CachedStorage:
    """The storage an ask should read through: the process's full cache, or a window when the
    experiment is past the limit and ``tuner`` (canonical name) is one a window serves."""
    if tuner not in WINDOWED and tuner not in BLIND:
        return cache
    if len(backend.get_study_directions(study_id)) > 1:
        return cache
    if finished_count(backend.engine, study_id) <= HISTORY_LIMIT:
        return cache
    return HistoryWindow(backend, learns=tuner in WINDOWED, limit=HISTORY_LIMIT)

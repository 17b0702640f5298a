"""The history window a long experiment's ask reads: which trials a tuner sees past the limit,
that they are the store's own trials (values, parameters, last intermediate result), and that
below the limit, or for tuners a window does not serve, nothing changes."""

from __future__ import annotations

import uuid

import optuna
import pytest
import sqlalchemy as sa
from optuna.storages import RDBStorage
from optuna.trial import TrialState

from trialflow.config.model import AlgorithmConfig
from trialflow.config.search_space import parse_search_space
from trialflow.store.experiment_store import ExperimentStore
from trialflow.store.snapshot import SnapshotCache
from trialflow.trial.status import TrialStatus
from trialflow.tuning import history
from trialflow.tuning.asker import ask
from trialflow.tuning.history import HistoryWindow, asking_storage, window_ids

#: Every test that takes ``store`` runs on SQLite and on PostgreSQL.
pytestmark = pytest.mark.both_databases

SPACE = parse_search_space({"x": {"_type": "uniform", "_value": [0, 1]}, "k": {"_type": "choice", "_value": [1, 2]}})


def _unique(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:8]}"  # the PostgreSQL database is the session's


def _fill(store: ExperimentStore, name: str, count: int, direction: str = "maximize") -> int:
    """``count`` finished trials through the store's own ask and finish: every fifth stopped
    early after three intermediate results, the rest complete with values in no order."""
    random = AlgorithmConfig(name="Random", class_args={"seed": 0})
    store.open_experiment(name, direction=direction)  # type: ignore[arg-type]
    for i in range(count):
        asked = ask(store, name, i, f"{name}-{i}", random, SPACE)
        store.storage.write_intermediate_values(asked.storage_id, [(s, i + s / 10) for s in range(3)])
        if i % 5 == 4:
            store.finish(asked.storage_id, TrialStatus.EARLY_STOPPED)
        else:
            store.finish(asked.storage_id, TrialStatus.SUCCEEDED, (i * 7 % count) / count)
    return store.storage.get_study_id_from_name(name)


@pytest.mark.parametrize("direction", ["maximize", "minimize"])
def test_the_window_is_the_best_half_and_the_newest_half(store, direction):
    sid = _fill(store, _unique("w"), 40, direction)
    trials = RDBStorage.get_all_trials(store.storage, sid, deepcopy=False)
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    best = sorted(complete, key=lambda t: t.value, reverse=direction == "maximize")[:5]
    newest = sorted([t for t in trials if t.state != TrialState.FAIL], key=lambda t: t._trial_id)[-5:]
    with store.engine.connect() as conn:
        ids = window_ids(conn, sid, store.storage.get_study_directions(sid)[0], limit=10)
    assert ids == sorted({t._trial_id for t in best + newest})
    assert len(ids) > 5


def test_a_learning_tuner_past_the_limit_sees_the_window_as_the_store_holds_it(store, monkeypatch):
    monkeypatch.setattr(history, "HISTORY_LIMIT", 10)
    sid = _fill(store, _unique("w"), 30)
    cache = SnapshotCache(store.storage)
    window = asking_storage(cache, store.storage, sid, "TPE")
    assert isinstance(window, HistoryWindow)
    seen = window.get_all_trials(sid, deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED))
    truth = {t._trial_id: t for t in RDBStorage.get_all_trials(store.storage, sid, deepcopy=False)}
    with store.engine.connect() as conn:
        assert [t._trial_id for t in seen] == window_ids(conn, sid, optuna.study.StudyDirection.MAXIMIZE, 10)
    for t in seen:
        whole = truth[t._trial_id]
        assert (t.number, t.state, t.values, t.params, t.distributions) == (
            whole.number,
            whole.state,
            whole.values,
            whole.params,
            whole.distributions,
        )
        last = max(whole.intermediate_values)
        assert t.intermediate_values == {last: whole.intermediate_values[last]}
    assert any(t.state == TrialState.PRUNED for t in seen)  # the newest half has early-stopped ones


@pytest.mark.parametrize("finished", [5, 30])
def test_a_blind_tuner_reads_no_finished_trial_below_the_limit_or_past_it(store, monkeypatch, finished):
    """Random, grid and batch draw without looking: their ask reads only the trials still
    running, and not through the process's shared cache (one lock for every ask)."""
    monkeypatch.setattr(history, "HISTORY_LIMIT", 10)
    sid = _fill(store, _unique("w"), finished)
    cache = SnapshotCache(store.storage)
    window = asking_storage(cache, store.storage, sid, "Random")
    assert isinstance(window, HistoryWindow) and window is not cache
    assert window.get_all_trials(sid, deepcopy=False) == []
    running = store.storage.create_new_trial(sid)
    assert [t._trial_id for t in window.get_all_trials(sid, deepcopy=False)] == [running]


@pytest.mark.slow
@pytest.mark.parametrize("tuner", ["TPE", "Evolution"])
def test_below_the_limit_and_for_evolution_the_ask_reads_the_full_cache(store, monkeypatch, tuner):
    monkeypatch.setattr(history, "HISTORY_LIMIT", 30)
    sid = _fill(store, _unique("w"), 30)
    cache = SnapshotCache(store.storage)
    assert asking_storage(cache, store.storage, sid, tuner) is cache  # 30 finished: not past 30
    sid2 = _fill(store, _unique("w"), 31)
    past = asking_storage(cache, store.storage, sid2, tuner)
    assert (past is cache) == (tuner == "Evolution")


def test_several_objectives_keep_the_full_cache(store, monkeypatch):
    monkeypatch.setattr(history, "HISTORY_LIMIT", 2)
    random = AlgorithmConfig(name="Random", class_args={"seed": 0})
    objectives = [{"metric": "a", "mode": "maximize"}, {"metric": "b", "mode": "minimize"}]
    name = _unique("mo")
    store.open_experiment(name, objectives=objectives)
    for i in range(4):
        asked = ask(store, name, i, f"mo-{i}", random, SPACE)
        store.finish(asked.storage_id, TrialStatus.SUCCEEDED, {"a": i, "b": -i, "default": i})
    cache = SnapshotCache(store.storage)
    assert asking_storage(cache, store.storage, store.storage.get_study_id_from_name(name), "TPE") is cache


@pytest.mark.slow
@pytest.mark.parametrize("tuner", ["TPE", "Anneal", "GP", "Random"])
def test_asks_past_the_limit_read_the_window_and_give_new_in_space_trials(store, monkeypatch, tuner):
    """The whole ask through the window: a learning tuner's ask reads the window's finished
    trials (at most the limit, the best among them), Random's none; each trial gets parameters
    in the space and is recorded once."""
    monkeypatch.setattr(history, "HISTORY_LIMIT", 20)
    seen: list[list[optuna.trial.FrozenTrial]] = []
    original = HistoryWindow.get_all_trials

    def spied(self, study_id, deepcopy=True, states=None):  # type: ignore[no-untyped-def]
        trials = original(self, study_id, deepcopy, states)
        seen.append([t for t in trials if t.state.is_finished()])
        return trials

    monkeypatch.setattr(HistoryWindow, "get_all_trials", spied)
    name = _unique("w")
    _fill(store, name, 40)
    best = max(
        (t for t in RDBStorage.get_all_trials(store.storage, store.study_id(name)) if t.value is not None),
        key=lambda t: t.value,
    )
    algorithm = AlgorithmConfig(name=tuner, class_args={"seed": 3})
    asked = [ask(store, name, 40 + i, f"w-{40 + i}", algorithm, SPACE) for i in range(3)]
    read = [trials for trials in seen if trials]
    if tuner == "Random":
        assert seen and not read  # asked through the window, and it read no finished trial
    else:
        assert read and all(0 < len(trials) <= 20 for trials in read)
        assert all(best._trial_id in {t._trial_id for t in trials} for trials in read)
    for a in asked:
        assert 0 <= a.parameters["x"] <= 1 and a.parameters["k"] in (1, 2)
        assert not a.resumed
        store.finish(a.storage_id, TrialStatus.SUCCEEDED, 0.5)
    assert [store.find_trial(name, 40 + i).storage_id for i in range(3)] == [a.storage_id for a in asked]


def _row(store: ExperimentStore, sid: int):  # type: ignore[no-untyped-def]
    with store.engine.connect() as conn:
        return conn.execute(history.WINDOWS.select().where(history.WINDOWS.c.study_id == sid)).first()


def _whole(store: ExperimentStore, sid: int, limit: int) -> list[int]:
    with store.engine.connect() as conn:
        return window_ids(conn, sid, store.storage.get_study_directions(sid)[0], limit)


@pytest.mark.slow
@pytest.mark.parametrize("direction", ["maximize", "minimize"])
def test_the_kept_window_is_the_window_found_whole_while_trials_come_and_end_in_any_order(
    store, monkeypatch, direction
):
    """The row accounts for every trial up to its id; a trial it left out never comes back and
    one that was running when it was written is read again when it ends: at every step the
    kept window is the one a whole sort finds, and the row moves forward once WINDOW_STEP
    trials ended after it."""
    monkeypatch.setattr(history, "WINDOW_STEP", 3)
    name = _unique("k")
    sid = _fill(store, name, 30, direction)
    random = AlgorithmConfig(name="Random", class_args={"seed": 0})
    steer = optuna.study.StudyDirection.MAXIMIZE if direction == "maximize" else optuna.study.StudyDirection.MINIMIZE
    running = [ask(store, name, 30 + i, f"{name}-{30 + i}", random, SPACE) for i in range(4)]
    lasts = []
    for step in range(24):
        kept = [t._trial_id for t in history.window_trials(store.engine, sid, steer, 10)]
        assert kept == _whole(store, sid, 10), step
        lasts.append(_row(store, sid).last_trial_id)
        # trials end out of order: the oldest running one now and then with the best value
        # (a trial below the row's id that it saw running), new ones with values in no order
        if step % 4 == 0 and running:
            best = 2.0 if direction == "maximize" else -2.0
            store.finish(running.pop(0).storage_id, TrialStatus.SUCCEEDED, best + step)
        asked = ask(store, name, 40 + step, f"{name}-{40 + step}", random, SPACE)
        if step % 5 == 3:
            store.finish(asked.storage_id, TrialStatus.FAILED)
        elif step % 5 == 4:
            store.finish(asked.storage_id, TrialStatus.EARLY_STOPPED)
        elif step % 7 == 6:
            running.append(asked)  # ends later
        else:
            store.finish(asked.storage_id, TrialStatus.SUCCEEDED, (step * 13 % 17) / 17)
    assert lasts == sorted(lasts) and len(set(lasts)) > 3  # written again as trials ended, only forward


def test_a_row_whose_count_moved_or_of_another_limit_is_found_whole_again(store, monkeypatch):
    """A trial that appears below the row's id (PostgreSQL may commit a lower id after a higher
    one), a study id reused, or another limit: the row is not used, the window is found whole
    and the row written again; deleting the experiment deletes its row."""
    name = _unique("k")
    sid = _fill(store, name, 30)
    steer = optuna.study.StudyDirection.MAXIMIZE
    history.window_trials(store.engine, sid, steer, 10)
    row = _row(store, sid)
    assert history.load_window(store.engine, sid, steer, 10) is not None
    assert history.load_window(store.engine, sid, steer, 12) is None  # another limit
    assert history.load_window(store.engine, sid, optuna.study.StudyDirection.MINIMIZE, 10) is None
    with store.engine.begin() as conn:
        conn.execute(
            history.WINDOWS.update().where(history.WINDOWS.c.study_id == sid).values(trial_count=row.trial_count - 1)
        )
    assert history.load_window(store.engine, sid, steer, 10) is None
    assert [t._trial_id for t in history.window_trials(store.engine, sid, steer, 10)] == _whole(store, sid, 10)
    assert _row(store, sid).trial_count == row.trial_count  # made again, counted right
    store.delete_experiment(name)
    assert _row(store, sid) is None


def test_an_ask_with_a_kept_window_counts_no_finished_trial(store, monkeypatch):
    """Past the limit once, always past: with a kept row the ask neither counts the finished
    trials nor sorts every value; it reads the row, the count up to its id and what came after."""
    monkeypatch.setattr(history, "HISTORY_LIMIT", 10)
    name = _unique("k")
    sid = _fill(store, name, 30)
    tpe = AlgorithmConfig(name="TPE", class_args={"seed": 1})
    ask(store, name, 30, f"{name}-30", tpe, SPACE)  # finds the window whole and keeps it
    assert _row(store, sid) is not None

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise AssertionError("the finished trials were counted")

    def sorted_whole(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise AssertionError("every value was sorted")

    monkeypatch.setattr(history, "finished_count", counted)
    monkeypatch.setattr(history, "window_ids", sorted_whole)
    asked = ask(store, name, 31, f"{name}-31", tpe, SPACE)
    assert 0 <= asked.parameters["x"] <= 1


def test_a_trial_appearing_below_the_rows_id_before_it_is_written_again_is_not_lost(store, monkeypatch):
    """PostgreSQL may commit a trial with a lower id after higher ones. One that appears below
    the kept row's id after the row was checked, and finishes with the best value, is found when
    the row is written again (its count below the old id moved: the window is found whole)."""
    monkeypatch.setattr(history, "WINDOW_STEP", 1)
    name, other = _unique("k"), _unique("o")
    random = AlgorithmConfig(name="Random", class_args={"seed": 0})
    store.open_experiment(other)
    sid = _fill(store, name, 20)
    spare = store.storage.create_new_trial(store.storage.get_study_id_from_name(other))  # an id to free
    asked = ask(store, name, 20, f"{name}-20", random, SPACE)
    store.finish(asked.storage_id, TrialStatus.SUCCEEDED, 0.5)
    steer = optuna.study.StudyDirection.MAXIMIZE
    history.window_trials(store.engine, sid, steer, 10)  # the row, past the spare id
    kept = history.load_window(store.engine, sid, steer, 10)
    assert kept is not None and kept.last > spare
    with store.engine.begin() as conn:  # the spare id freed, then taken by a late trial of this study
        conn.execute(sa.text("DELETE FROM trial_system_attributes WHERE trial_id = :t"), {"t": spare})
        conn.execute(sa.text("DELETE FROM trials WHERE trial_id = :t"), {"t": spare})
        conn.execute(
            sa.text(
                "INSERT INTO trials (trial_id, number, study_id, state, datetime_start, datetime_complete) "
                "VALUES (:t, 999, :s, 'COMPLETE', CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)"
            ),
            {"t": spare, "s": sid},
        )
        conn.execute(
            sa.text("INSERT INTO trial_values (trial_id, objective, value, value_type) VALUES (:t, 0, 99.0, 'FINITE')"),
            {"t": spare},
        )
    later = ask(store, name, 21, f"{name}-21", random, SPACE)  # one more ended: the row is due
    store.finish(later.storage_id, TrialStatus.SUCCEEDED, 0.1)
    history.window_trials(store.engine, sid, steer, 10, kept)  # refreshed from the row checked before
    again = history.load_window(store.engine, sid, steer, 10)
    assert again is not None and spare in {t._trial_id for t in again.trials}
    assert [t._trial_id for t in history.window_trials(store.engine, sid, steer, 10)] == _whole(store, sid, 10)

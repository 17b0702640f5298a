"""Trials that ended, read once: the kept tallies equal a whole read, and what could change
(running trials, new trials, a store replaced underneath) is read again (SQLite and PostgreSQL)."""

from __future__ import annotations

import time

import pytest
import sqlalchemy as sa

from tests.helpers.filled_store import RANDOM, SPACE, fill
from trialflow.platforms.base import TrialStatus
from trialflow.queries import settled
from trialflow.queries.settled import Tally, TrialFacts, study_trials
from trialflow.queries.tables import study_id_of
from trialflow.tuning.asker import ask

pytestmark = pytest.mark.both_databases

LATER = 2 * settled.SETTLE_S  # seconds ahead: every trial that ended is settled by then


def sid_of(store, experiment_id: str) -> int:
    with store.storage.engine.connect() as conn:
        return study_id_of(conn, experiment_id)


def whole_read(store, experiment_id: str) -> Tally:
    """The tally as one read of every trial, nothing kept (what the pages did before)."""
    engine = store.storage.engine
    settled._stores.pop(str(engine.url), None)
    sid = sid_of(store, experiment_id)
    study = study_trials(engine, [sid], time.time())[sid]
    settled._stores.pop(str(engine.url), None)
    return study.whole_tally()


def test_a_tally_counts_statuses_times_and_completed_values(store):
    fill(store)  # minimize; SUCCEEDED 5 (finals 1.0, 1.2, 1.4, 1.6, 1.7), FAILED, EARLY_STOPPED, RUNNING
    tally = whole_read(store, "eq000001")
    assert tally.counts == {"SUCCEEDED": 5, "FAILED": 1, "EARLY_STOPPED": 1, "RUNNING": 1}
    assert (tally.low, tally.high) == (1.0, 1.7)  # the early-stopped trial's value is not completed
    assert tally.started is not None and tally.ended is not None and tally.started <= tally.ended
    lone = Tally()
    lone.add(TrialFacts(0, "PRUNED", "EARLY_STOPPED", 0.1, None, None))
    assert lone.counts == {"EARLY_STOPPED": 1} and lone.low is None and lone.started is None


def test_settled_trials_are_kept_and_the_rest_read_again(store):
    fill(store)
    engine = store.storage.engine
    sid = sid_of(store, "eq000001")
    now = time.time()
    first = study_trials(engine, [sid], now + LATER)[sid]
    assert len(first.settled) == 7 and [t.index for t in first.unsettled] == [5]
    # Optuna never writes a finished trial again: written here behind its back, it shows that
    # a settled trial is not read again
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE trial_values SET value = 99 WHERE value = 1.0"))
    store.finish(store.find_trial_id("eq000001", 5), TrialStatus.SUCCEEDED, 0.5)
    asked = ask(store, "eq000001", 8, "eq000001-0008", RANDOM, SPACE)
    store.set_status(asked.storage_id, TrialStatus.RUNNING, handle={"platform": "local"})
    second = study_trials(engine, [sid], now + LATER)[sid]
    tally = second.whole_tally()
    assert tally.counts == {"SUCCEEDED": 6, "FAILED": 1, "EARLY_STOPPED": 1, "RUNNING": 1}
    assert (tally.low, tally.high) == (0.5, 1.7)  # 1.0 kept from before, 0.5 read now
    assert [t.index for t in second.unsettled] == [8]
    # without settling time, a trial that ended a moment ago is read again next time
    third = study_trials(engine, [sid], now)[sid]
    assert {t.index for t in third.unsettled} == {8}  # the rest were kept already
    assert third.whole_tally() == tally


def test_a_trial_that_ended_a_moment_ago_is_not_kept(store):
    fill(store)
    engine = store.storage.engine
    sid = sid_of(store, "eq000001")
    study = study_trials(engine, [sid], time.time())[sid]
    assert not study.settled and len(study.unsettled) == 8  # all ended within SETTLE_S
    assert study.whole_tally() == whole_read(store, "eq000001")


def test_a_study_replaced_underneath_is_read_whole_again(store):
    fill(store)
    engine = store.storage.engine
    sid = sid_of(store, "eq000001")
    study_trials(engine, [sid], time.time() + LATER)
    store.delete_experiment("eq000001")
    fill(store)  # the same name; the same study id where the database gives it again
    again = sid_of(store, "eq000001")
    fresh = study_trials(engine, [again], time.time() + LATER)[again]
    assert fresh.whole_tally() == whole_read(store, "eq000001")
    assert len(fresh.settled) + len(fresh.unsettled) == 8


def test_many_studies_in_one_read_and_the_least_recent_forgotten(store, monkeypatch):
    engine = store.storage.engine
    names = [f"em{i:06d}" for i in range(3)]
    for name in names:
        fill(store, name)
    sids = [sid_of(store, n) for n in names]
    expected = [whole_read(store, n) for n in names]
    monkeypatch.setattr(settled, "KEPT_TRIALS", 16)  # two studies of 8
    now = time.time() + LATER
    read = study_trials(engine, sids, now)
    assert [read[s].whole_tally() for s in sids] == expected
    kept = settled._stores[str(engine.url)].studies
    assert list(kept) == sids[1:]  # the least recently read forgotten
    again = study_trials(engine, sids, now)
    assert [again[s].whole_tally() for s in sids] == [read[s].whole_tally() for s in sids]


@pytest.mark.slow
def test_statements_stay_bounded_with_many_studies(store):
    """130 known studies are read again in two statements (at most 100 studies each), and what
    each statement finds lands on its own study."""
    engine = store.storage.engine
    asked = {}
    for i in range(130):
        store.open_experiment(f"ex{i:06d}", "minimize")
        asked[i] = ask(store, f"ex{i:06d}", 0, f"ex{i:06d}-0000", RANDOM, SPACE)  # running: read each time
    sids = [sid_of(store, f"ex{i:06d}") for i in range(130)]
    study_trials(engine, sids, time.time())
    for i in (0, 99, 100, 129):  # either side of the statements' boundary
        store.finish(asked[i].storage_id, TrialStatus.SUCCEEDED, float(i))
    statements: list[str] = []

    def seen(conn, cursor, statement, *rest):
        if "trialflow_trial_index" in statement:
            statements.append(statement)

    sa.event.listen(engine, "before_cursor_execute", seen)
    try:
        read = study_trials(engine, sids, time.time())
    finally:
        sa.event.remove(engine, "before_cursor_execute", seen)
    assert len(statements) == 2  # 100 studies, then 30
    for i, sid in enumerate(sids):
        expected = {"SUCCEEDED": 1} if i in (0, 99, 100, 129) else {"WAITING": 1}
        assert read[sid].whole_tally().counts == expected, i
    assert read[sids[100]].whole_tally().low == 100.0


def test_indexes_claimed_out_of_order_are_found_in_the_gaps(store):
    """Trial tasks claim their indexes in any order (a run's task 12 may ask before task 9), and
    a stopped run leaves the rest of its window empty: a trial that appears below the highest
    index read is found there, however late."""
    fill(store)  # indexes 0-7
    engine = store.storage.engine
    sid = sid_of(store, "eq000001")
    later = time.time() + LATER
    for index in (12, 20):
        store.finish(
            ask(store, "eq000001", index, f"eq000001-{index:04d}", RANDOM, SPACE).storage_id, TrialStatus.SUCCEEDED, 3.0
        )
    first = study_trials(engine, [sid], later)[sid]
    assert first.highest == 20 and first.holes == [(8, 11), (13, 19)]
    for index in (9, 15, 8):  # into both gaps, one at a gap's edge
        store.finish(
            ask(store, "eq000001", index, f"eq000001-{index:04d}", RANDOM, SPACE).storage_id,
            TrialStatus.SUCCEEDED,
            0.25,
        )
    second = study_trials(engine, [sid], later)[sid]
    assert sorted(t.index for t in second.trials()) == [*range(10), 12, 15, 20]
    assert second.holes == [(10, 11), (13, 14), (16, 19)]
    assert second.whole_tally() == whole_read(store, "eq000001")
    assert second.whole_tally().low == 0.25


def test_a_commands_sql_tallies_are_the_kept_ones(store):
    """A command that reads once asks SQL's aggregates (nothing kept); a server keeps the trials:
    both say the same of every experiment, a trial running, one without a status and a
    superseded ask (not indexed) included."""
    from trialflow import queries

    fill(store)
    fill(store, "eq000002", "dag_b")
    engine = store.storage.engine
    store.storage.create_new_trial(store.study_id("eq000002"))  # an ask that lost: never indexed
    asked = ask(store, "eq000002", 8, "eq000002-0008", RANDOM, SPACE)
    with engine.begin() as conn:  # a trial whose status was never written (another writer's half-done row)
        conn.execute(
            sa.text("DELETE FROM trial_user_attributes WHERE key = 'nni_status' AND trial_id = :t"),
            {"t": asked.storage_id},
        )
    sids = [sid_of(store, "eq000001"), sid_of(store, "eq000002")]
    kept = {sid: whole_read(store, name) for sid, name in zip(sids, ("eq000001", "eq000002"), strict=True)}
    assert settled.sql_tallies(engine, sids) == kept
    assert settled._stores.get(str(engine.url)) is None  # nothing kept by the command's read
    assert queries.list_experiments(engine, kept=False) == queries.list_experiments(engine)
    assert settled.sql_tallies(engine, []) == {}

"""The asked-for trials' queue (trialflow.store.trial_queue) on a real database: the oldest
waiting row goes to the next trial index, a retry finds its own row first, a row runs once
however many starts claim together, and an empty queue costs one statement and no write."""

from __future__ import annotations

import threading

import pytest
import sqlalchemy as sa

from trialflow.store.trial_queue import claim, drop_waiting, enqueue, release, waiting_count


@pytest.fixture
def study(store) -> int:
    store.open_experiment("equeue")
    return store.study_id("equeue")


def test_an_empty_queue_is_one_read_and_no_write(store, study):
    enqueue(store.engine, study, {"x": 1}, {"by": "ann"})
    assert claim(store.engine, study, 0) is not None  # the queue's table exists, now empty again
    statements: list[str] = []

    def executed(conn, cursor, statement, *rest):
        statements.append(statement)

    sa.event.listen(store.engine, "before_cursor_execute", executed)
    try:
        assert claim(store.engine, study, 1) is None
    finally:
        sa.event.remove(store.engine, "before_cursor_execute", executed)
    assert len(statements) == 1 and statements[0].lstrip().upper().startswith("SELECT")


def test_the_oldest_goes_first_and_a_retry_finds_its_own_row(store, study):
    first = enqueue(store.engine, study, {"x": 1}, {"by": "ann"})
    second = enqueue(store.engine, study, {"x": 2}, {"by": "bob"})
    taken = claim(store.engine, study, 5)
    assert taken is not None and (taken.seq, taken.parameters, taken.request) == (first, {"x": 1}, {"by": "ann"})
    assert claim(store.engine, study, 5).seq == first  # a retry of trial 5: its own row, not the next
    assert claim(store.engine, study, 6).seq == second
    assert claim(store.engine, study, 7) is None
    release(store.engine, first)  # trial 5's index went to another attempt: the row waits again
    assert waiting_count(store.engine, study) == 1
    assert claim(store.engine, study, 7).seq == first


def test_a_dropped_row_is_taken_by_nobody(store, study):
    enqueue(store.engine, study, {"x": 1}, {"by": "ann"})
    assert drop_waiting(store.engine, study) == 1
    assert claim(store.engine, study, 0) is None and waiting_count(store.engine, study) == 0


@pytest.mark.both_databases
def test_starts_that_claim_together_run_each_row_once(store, study):
    rows = [enqueue(store.engine, study, {"x": i}, {"by": "ann"}) for i in range(6)]
    got: dict[int, int | None] = {}
    go = threading.Barrier(10)

    def start(index: int) -> None:
        go.wait()
        taken = claim(store.engine, study, index)
        got[index] = None if taken is None else taken.seq

    threads = [threading.Thread(target=start, args=(i,)) for i in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    taken = [seq for seq in got.values() if seq is not None]
    assert sorted(taken) == rows  # every row once, none twice
    assert len(got) == 10 and list(got.values()).count(None) == 4

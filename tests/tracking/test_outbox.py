"""The tracking outbox on both databases: a row's claim is one process's at a time (decided by
the database, also when twenty threads ask at once), says whether anybody tried before, and
lets go when its holder dies (it expires); what was sent survives a read of garbage."""

from __future__ import annotations

import threading
import time

import pytest

from trialflow.tracking.outbox import AGAIN, NEW, Outbox, Sent

pytestmark = pytest.mark.both_databases


def _outbox(store) -> Outbox:
    store.open_experiment("eout1")
    return Outbox(store.engine, store.study_id("eout1"))


def test_a_claim_is_one_processes_and_says_whether_anybody_tried(store):
    outbox = _outbox(store)
    assert outbox.claim("3") == NEW
    assert outbox.claim("3") is None  # held
    outbox.release("3")
    assert outbox.claim("3") == AGAIN  # somebody tried: a run may exist, look for it first
    outbox.made("3", "run-a", "http://m/#/experiments/1/runs/run-a")
    assert outbox.run_ids() == {"3": "run-a"}
    assert outbox.claim("4", seconds=0.05) == NEW
    time.sleep(0.1)
    assert outbox.claim("4") == AGAIN  # its holder died: the claim expired


def test_twenty_threads_one_claim(store):
    outbox = _outbox(store)
    won: list[object] = []
    start = threading.Barrier(20)

    def take() -> None:
        start.wait()
        won.append(Outbox(store.engine, outbox.study_id).claim("7"))

    threads = [threading.Thread(target=take) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(map(str, won)) == ["None"] * 19 + ["new"]


def test_what_was_sent_round_trips_and_garbage_reads_as_nothing(store):
    outbox = _outbox(store)
    sent = Sent(
        params=True, last_step=41, final=True, ended="FINISHED", experiment="7", tags="ab", status="X", best=True
    )
    assert Sent.from_json(sent.to_json()) == sent
    outbox.claim("1")
    outbox.sent("1", sent)
    assert outbox.rows()["1"].sent == sent
    for garbage in (None, "", "[]", "{", '{"last_step": "x"}', '"text"'):
        assert Sent.from_json(garbage) == Sent()

"""trialConcurrency for trials started from the triggerer (trialflow.lifecycle.start_slots): the rule,
case by case, then claims racing on real stores, SQLite and PostgreSQL."""

from __future__ import annotations

import threading
import time

import pytest

from trialflow.config.model import AlgorithmConfig
from trialflow.config.search_space import parse_search_space
from trialflow.experiment.run_windows import RunWindow
from trialflow.lifecycle import start_slots
from trialflow.lifecycle.start_slots import HOLD_SECONDS, decide, decide_many, held_of
from trialflow.platforms.base import TrialStatus
from trialflow.tuning.asker import ask

NOW = 1_000.0
SPACE = parse_search_space({"x": {"_type": "uniform", "_value": [0, 1]}})
RANDOM = AlgorithmConfig(name="Random", class_args={"seed": 2})


@pytest.mark.parametrize(
    "held, asked, index, limit, granted, taken",
    [
        ({}, {}, 0, 2, True, 1),  # a free slot
        ({0: NOW + 5}, {}, 1, 2, True, 2),  # the last one
        ({0: NOW + 5, 1: NOW + 5}, {}, 2, 2, False, 2),  # none left: it waits
        ({0: NOW + 5}, {1: False}, 2, 2, False, 2),  # a running trial holds one
        ({0: NOW + 5}, {1: True}, 2, 2, True, 2),  # a closed trial holds none
        ({0: NOW - 1, 1: NOW + 5}, {}, 2, 2, True, 2),  # a start that died gave its slot back
        ({0: NOW + 5}, {0: False}, 1, 2, True, 2),  # an asked start counts once, through its trial
        ({0: NOW + 5, 1: NOW + 5}, {}, 1, 2, True, 2),  # tried again (a restarted triggerer): its own slot
        ({0: NOW + 5}, {1: False, 2: False}, 1, 2, True, 3),  # its trial runs already: re-attaching needs none
        ({}, {3: True}, 3, 1, True, 0),  # closed already: its start only reports it
        ({5: NOW + 5}, {0: False, 1: False, 2: False}, 4, 2, False, 4),  # a lowered limit: it waits
    ],
)
def test_the_rule(held, asked, index, limit, granted, taken):
    decision = decide(held, asked, index, limit, NOW)
    assert (decision.granted, decision.taken) == (granted, taken)
    assert all(until > NOW and i not in asked for i, until in decision.held.items())  # nothing stale kept
    if granted and index not in asked:
        assert decision.held[index] == NOW + HOLD_SECONDS  # held (again) from now


def test_one_pass_decides_as_deciding_one_by_one_lowest_first():
    """decide_many against the rule applied to each waiting start in turn, every case of up to
    five indexes in each role (held live or stale, asked running or closed, waiting) and limits
    0 to 4, plus a run of a thousand."""
    import itertools

    cases = 0
    roles = ("none", "live", "stale", "running", "closed")
    for assignment in itertools.product(roles, repeat=5):
        held = {i: NOW + (5 if r == "live" else -1) for i, r in enumerate(assignment) if r in ("live", "stale")}
        asked = {i: r == "closed" for i, r in enumerate(assignment) if r in ("running", "closed")}
        for waiting in ([0, 1, 2, 3, 4], [4, 2, 0], [3]):
            for limit in range(5):
                expected_held, expected = dict(held), []
                for index in sorted(waiting):
                    decision = decide(expected_held, asked, index, limit, NOW)
                    expected_held = decision.held
                    if decision.granted:
                        expected.append(index)
                assert decide_many(held, asked, waiting, limit, NOW) == (expected, expected_held)
                cases += 1
    assert cases == 5**5 * 3 * 5
    asked = {i: i % 3 == 0 for i in range(1000)}  # 334 closed, 666 running
    held = {i: NOW + 5 for i in range(1000, 1040)}
    granted, live = decide_many(held, asked, list(range(1000, 2000)), 700, NOW)
    assert granted == list(range(1000, 1040))  # the live starts keep theirs; no slot is free
    assert live == {i: NOW + HOLD_SECONDS for i in held}


def test_what_is_not_a_held_start_is_not_read_as_one():
    assert held_of({"1": 5.0, "x": 1.0, "2": "soon", "3": None}) == {1: 5.0}
    assert held_of(["1"]) == {} and held_of(None) == {}


def _opened(store, experiment_id: str = "eslots") -> RunWindow:
    store.open_experiment(experiment_id)
    return RunWindow(first_index=0, count=20, exists=True)


@pytest.mark.both_databases
def test_claims_racing_never_give_out_more_than_the_limit(store):
    window = _opened(store)
    granted: list[int] = []
    barrier = threading.Barrier(8)

    def start(index: int) -> None:
        barrier.wait()
        if start_slots.claim(store, "eslots", "r1", window, index, 3).granted:
            granted.append(index)

    threads = [threading.Thread(target=start, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(granted) == 3, granted
    assert sorted(held_of(store.experiment_attr("eslots", start_slots.slots_key("r1")))) == sorted(granted)


@pytest.mark.both_databases
def test_a_slot_passes_to_the_trial_and_frees_when_it_closes(store):
    window = _opened(store)
    assert start_slots.claim(store, "eslots", "r1", window, 0, 1).granted
    assert not start_slots.claim(store, "eslots", "r1", window, 1, 1).granted
    asked = ask(store, "eslots", 0, "t0", RANDOM, SPACE)  # the start asked: its trial holds the slot
    assert not start_slots.claim(store, "eslots", "r1", window, 1, 1).granted
    # the claim that saw the trial dropped the start's entry: the trial counts, once
    assert held_of(store.experiment_attr("eslots", start_slots.slots_key("r1"))) == {}
    assert start_slots.claim(store, "eslots", "r1", window, 0, 1).granted  # its own start, tried again
    store.finish(asked.storage_id, TrialStatus.SUCCEEDED, 0.5)
    assert start_slots.claim(store, "eslots", "r1", window, 1, 1).granted
    other_run = RunWindow(first_index=20, count=5, exists=True)  # another run's trials are its own
    assert start_slots.claim(store, "eslots", "r2", other_run, 20, 1).granted


def test_a_start_that_forgot_its_slot_frees_it_when_its_trial_closes(store):
    window = _opened(store)
    assert start_slots.claim(store, "eslots", "r1", window, 0, 1).granted
    asked = ask(store, "eslots", 0, "t0", RANDOM, SPACE)  # then its triggerer died: no release
    store.finish(asked.storage_id, TrialStatus.FAILED)
    assert start_slots.claim(store, "eslots", "r1", window, 1, 1).granted
    assert 0 not in held_of(store.experiment_attr("eslots", start_slots.slots_key("r1")))


def test_a_start_that_asked_nothing_gives_its_slot_back_at_once(store):
    window = _opened(store)
    assert start_slots.claim(store, "eslots", "r1", window, 0, 1).granted
    start_slots.release(store, "eslots", "r1", 0)  # it waits for its generation
    start_slots.release(store, "eslots", "r1", 0)  # twice: nothing more
    assert start_slots.claim(store, "eslots", "r1", window, 1, 1).granted


def test_a_claim_that_read_the_trials_before_an_ask_still_counts_that_start():
    """The race a give-back after the ask would open: the entry of a start that asked stays
    until a claim sees its trial, so a claim with the trials read a moment before the ask
    counts it (through its entry) and one after it counts it once (through its trial)."""
    held = {0: NOW + 5}
    assert not decide(held, {}, 1, 1, NOW).granted  # read before trial 0 was asked
    assert not decide(held, {0: False}, 1, 1, NOW).granted  # read after


@pytest.mark.both_databases
def test_one_look_grants_the_lowest_waiting_starts_the_free_slots(store):
    window = _opened(store)
    ask(store, "eslots", 0, "t0", RANDOM, SPACE)  # running: one slot of three taken
    assert start_slots.claim_many(store, "eslots", "r1", window, [5, 3, 4, 1], 3) == [1, 3]
    assert sorted(held_of(store.experiment_attr("eslots", start_slots.slots_key("r1")))) == [1, 3]
    assert start_slots.claim_many(store, "eslots", "r1", window, [4, 5], 3) == []  # none left
    assert start_slots.claim_many(store, "eslots", "r1", window, [3, 0], 3) == [0, 3]  # its own, and a running one


@pytest.mark.both_databases
def test_a_look_reads_only_what_the_rule_consults_and_decides_as_with_the_whole_run(store):
    """claim_many reads the running trials, those at or above the lowest waiting index, and
    the starts under way below it not seen yet (asked_for_look, asked_at), and grants what
    the rule grants with every asked trial of the run read: a start under way whose trial
    closed gives its slot back, one that has not asked keeps it, a stale one is dropped."""
    window = RunWindow(first_index=0, count=14, exists=True)
    store.open_experiment("eslots")
    running, closed = {0, 1, 5, 9}, {2, 3, 7, 10}
    for index in sorted(running | closed):
        asked = ask(store, "eslots", index, f"t{index}", RANDOM, SPACE)
        if index in closed:
            store.finish(asked.storage_id, TrialStatus.SUCCEEDED, 0.5)
    assert store.asked_between("eslots", 0, 14) == {i: i in closed for i in running | closed}
    assert store.asked_for_look("eslots", 0, 14, 7) == {0: False, 1: False, 5: False, 9: False, 7: True, 10: True}
    assert store.asked_at("eslots", [2, 4, 5, 13]) == {2: True, 5: False} and store.asked_at("eslots", []) == {}
    key = start_slots.slots_key("r1")
    soon = time.time() + 60
    # under way: 2 (asked, closed since), 3 (closed), 4 and 6 (not asked), 8 (stale), 12 (not asked)
    held = {2: soon, 3: soon, 4: soon, 6: soon, 8: time.time() - 1, 12: soon}
    for waiting, limit in [([6, 8, 11, 12, 13], 7), ([11, 13], 7), ([8, 9, 10, 11], 8), ([], 7), ([13], 3)]:
        store.update_experiment_attr("eslots", key, lambda current: {str(i): u for i, u in held.items()})
        expected, live = decide_many(held, store.asked_between("eslots", 0, 14), waiting, limit, time.time())
        assert start_slots.claim_many(store, "eslots", "r1", window, waiting, limit) == expected, (waiting, limit)
        assert sorted(held_of(store.experiment_attr("eslots", key))) == sorted(live), (waiting, limit)

"""A trial's turn and start where its task waits (trialflow.lifecycle.triggered_start), on a real
store and real local trials, without Airflow: it waits for a slot holding nothing, starts
exactly as a worker's start does, and a run that starts no more trials needs no slot to say so."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from trialflow.config import load_config
from trialflow.experiment import Experiment
from trialflow.lifecycle import start_slots, trial_lifecycle
from trialflow.lifecycle.start_slots import held_of, slots_key
from trialflow.lifecycle.triggered_start import StartSuperseded, poke, start_in_turn
from trialflow.platforms.base import TrialStatus
from trialflow.runs import start_run

CONFIG = f"""\
searchSpace: {{x: {{_type: uniform, _value: [0, 1]}}}}
trialCommand: {sys.executable} -c pass
trialCodeDirectory: .
trialConcurrency: 1
maxTrialNumber: 3
tuner: {{name: Random}}
trainingService: {{platform: local}}
"""


@pytest.fixture
def experiment(tmp_path: Path, store) -> Experiment:
    (tmp_path / "config.yml").write_text(CONFIG)
    experiment = Experiment(load_config(tmp_path / "config.yml"), "eturn", tmp_path / "work")
    start_run(experiment, store, "dag_a", "r1", {})
    return experiment


def _in_turn(experiment, store, map_index: int, limit: int = 1, start=None, attempt: int = 0):
    start = start or (lambda: trial_lifecycle.start_trial(experiment, store, "r1", map_index))
    return start_in_turn(
        experiment,
        store,
        "r1",
        map_index,
        lambda: limit,
        start,
        poll_interval=0.05,
        wait_interval=0.05,
        attempt=attempt,
    )


def test_a_start_waits_for_its_turn_asking_nothing_then_starts(experiment, store):
    async def scenario() -> None:
        first = await _in_turn(experiment, store, 0)
        second = asyncio.ensure_future(_in_turn(experiment, store, 1))
        await asyncio.sleep(1.0)
        assert not second.done() and store.find_trial(experiment.experiment_id, 1) is None  # waits, unasked
        trial_lifecycle.finish_trial(store, first.record.storage_id, TrialStatus.SUCCEEDED, None)
        started = await asyncio.wait_for(second, 10)
        assert started.record.trial_index == 1 and started.handle is not None

    asyncio.run(scenario())


def test_a_run_that_starts_no_more_trials_says_so_without_a_slot(experiment, store):
    async def scenario() -> None:
        with pytest.raises(trial_lifecycle.TrialNotStarted, match="this run holds 3 trial"):
            await asyncio.wait_for(_in_turn(experiment, store, 7, limit=0), 10)  # no slot would ever come

    asyncio.run(scenario())


def test_a_start_that_waits_gives_its_slot_back_and_asks_again(experiment, store):
    tries: list[dict[int, float]] = []

    def held() -> dict[int, float]:
        return held_of(store.experiment_attr(experiment.experiment_id, slots_key("r1")))

    def start() -> trial_lifecycle.StartedTrial:
        tries.append(held())  # it holds its slot while it starts
        if len(tries) == 1:
            raise trial_lifecycle.TrialWaits("t0", "its generation is running")
        return trial_lifecycle.start_trial(experiment, store, "r1", 0)

    async def scenario() -> trial_lifecycle.StartedTrial:
        starting = asyncio.ensure_future(
            start_in_turn(experiment, store, "r1", 0, lambda: 1, start, poll_interval=0.05, wait_interval=1.0)
        )
        await asyncio.sleep(0.5)
        assert held() == {}  # while it waits, its slot is free for another trial
        return await asyncio.wait_for(starting, 10)

    started = asyncio.run(scenario())
    assert [list(h) for h in tries] == [[0], [0]] and started.record.trial_index == 0


def test_the_waiting_starts_of_a_run_share_one_look_and_take_slots_lowest_first(experiment, store):
    """Three starts waiting at a limit of one: each look is one read and one compare-and-set for
    all of them, and the slot that frees goes to the lowest index."""
    looks: list[list[int]] = []
    claim_many = start_slots.claim_many

    def counted(store_, experiment_id, run_id, window, indexes, limit):
        looks.append(list(indexes))
        return claim_many(store_, experiment_id, run_id, window, indexes, limit)

    async def scenario() -> list[int]:
        order: list[int] = []
        first = await _in_turn(experiment, store, 0)

        async def second(i: int) -> None:
            started = await _in_turn(experiment, store, i)
            order.append(started.record.trial_index)
            trial_lifecycle.finish_trial(store, started.record.storage_id, TrialStatus.SUCCEEDED, None)
            poke(experiment.experiment_id, "r1")

        waiting = [asyncio.ensure_future(second(i)) for i in (2, 1)]
        await asyncio.sleep(0.5)
        # The two register a moment apart (each reads its start in a thread first), so a look may
        # come between them; once both wait, every look is one for both.
        both = looks.index([1, 2])
        assert looks[0] == [0] and all(look in ([1], [2]) for look in looks[1:both])
        assert all(look == [1, 2] for look in looks[both:])  # one look for both
        trial_lifecycle.finish_trial(store, first.record.storage_id, TrialStatus.SUCCEEDED, None)
        poke(experiment.experiment_id, "r1")
        await asyncio.wait_for(asyncio.gather(*waiting), 10)
        return order

    import trialflow.lifecycle.triggered_start as triggered_start

    original = triggered_start.start_slots.claim_many
    triggered_start.start_slots.claim_many = counted  # type: ignore[assignment]
    try:
        assert asyncio.run(scenario()) == [1, 2]
    finally:
        triggered_start.start_slots.claim_many = original  # type: ignore[assignment]


def test_a_start_cancelled_while_it_waits_is_never_asked_when_the_slot_frees(experiment, store):
    async def scenario() -> None:
        first = await _in_turn(experiment, store, 0)
        waiting = asyncio.ensure_future(_in_turn(experiment, store, 1))
        await asyncio.sleep(0.3)
        waiting.cancel()  # its task was marked failed: the trigger is cancelled
        trial_lifecycle.finish_trial(store, first.record.storage_id, TrialStatus.SUCCEEDED, None)
        poke(experiment.experiment_id, "r1")
        await asyncio.sleep(0.5)
        assert waiting.cancelled() and store.find_trial(experiment.experiment_id, 1) is None
        assert held_of(store.experiment_attr(experiment.experiment_id, slots_key("r1"))) == {}

    asyncio.run(scenario())


def test_a_start_that_waited_when_its_task_was_cleared_never_takes_the_slot_the_clear_frees(experiment, store):
    """The api-server marks the clear (trialflow.steering.cleared_starts) before it stops the
    run's running trials: the slot they free goes to no start that was waiting at the clear
    (Airflow cancels those a moment later), and a start that begins after the clear (the
    task's new try) takes it."""
    from trialflow.steering.cleared_starts import mark_cleared

    async def scenario() -> None:
        first = await _in_turn(experiment, store, 0)
        waiting = asyncio.ensure_future(_in_turn(experiment, store, 1))
        await asyncio.sleep(0.3)
        assert mark_cleared(store, "dag_a", "r1", None, None) == 1  # the whole run
        trial_lifecycle.finish_trial(store, first.record.storage_id, TrialStatus.USER_CANCELED, "cleared")
        poke(experiment.experiment_id, "r1")
        await asyncio.sleep(1.0)
        assert not waiting.done() and store.find_trial(experiment.experiment_id, 1) is None
        waiting.cancel()  # Airflow's cancel of the cleared trigger
        await asyncio.sleep(0.1)
        again = await asyncio.wait_for(_in_turn(experiment, store, 1), 10)  # the new try
        assert again.record.trial_index == 1 and again.handle is not None

    asyncio.run(scenario())


@pytest.mark.parametrize("order", [(1, 2), (2, 1)])
def test_of_two_tries_waiting_to_start_one_trial_the_later_try_starts_it_and_the_other_ends(experiment, store, order):
    """Airflow 3.3 can run an old try's trigger again beside its task's new try (a trigger's last
    event crossing a clear: StartSuperseded). Both wait for the same trial's turn: the later try
    starts it, once; the earlier one ends at once, whichever came first (the second used to
    replace the first's place, and the one left out waited forever)."""
    launches: list[int] = []

    def start() -> trial_lifecycle.StartedTrial:
        launches.append(1)
        return trial_lifecycle.start_trial(experiment, store, "r1", 1)

    async def scenario() -> None:
        first = await _in_turn(experiment, store, 0)  # holds the only slot
        tries = {
            attempt: asyncio.ensure_future(_in_turn(experiment, store, 1, start=start, attempt=attempt))
            for attempt in order
        }
        await asyncio.sleep(0.3)
        with pytest.raises(StartSuperseded, match="try 2 of its task waits for trial 1's turn"):
            await asyncio.wait_for(tries[1], 5)  # ended without waiting for the slot
        assert not tries[2].done()
        trial_lifecycle.finish_trial(store, first.record.storage_id, TrialStatus.SUCCEEDED, None)
        poke(experiment.experiment_id, "r1")
        started = await asyncio.wait_for(tries[2], 10)
        assert started.record.trial_index == 1 and started.handle is not None and launches == [1]

    asyncio.run(scenario())


def test_of_two_starts_of_one_trial_and_the_same_try_the_one_that_waited_first_ends(experiment, store):
    async def scenario() -> None:
        first = await _in_turn(experiment, store, 0)  # holds the only slot
        earlier = asyncio.ensure_future(_in_turn(experiment, store, 1, attempt=1))
        await asyncio.sleep(0.2)
        later = asyncio.ensure_future(_in_turn(experiment, store, 1, attempt=1))
        with pytest.raises(StartSuperseded, match="try 1 of its task waits for trial 1's turn"):
            await asyncio.wait_for(earlier, 5)
        trial_lifecycle.finish_trial(store, first.record.storage_id, TrialStatus.SUCCEEDED, None)
        poke(experiment.experiment_id, "r1")
        assert (await asyncio.wait_for(later, 10)).record.trial_index == 1

    asyncio.run(scenario())

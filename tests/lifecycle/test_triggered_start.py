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
from trialflow.lifecycle import trial_lifecycle
from trialflow.lifecycle.start_slots import held_of, slots_key
from trialflow.lifecycle.triggered_start import start_in_turn
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


def _in_turn(experiment, store, map_index: int, limit: int = 1, start=None):
    start = start or (lambda: trial_lifecycle.start_trial(experiment, store, "r1", map_index))
    return start_in_turn(
        experiment, store, "r1", map_index, lambda: limit, start, poll_interval=0.05, wait_interval=0.05
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

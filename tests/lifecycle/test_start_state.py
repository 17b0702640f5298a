"""What a trial's start reads of its experiment (trialflow.lifecycle.start_state), on a real store:
each field as the feature that writes it left it, all of it on one connection."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

from trialflow.config import load_config
from trialflow.experiment import Experiment
from trialflow.lifecycle.start_state import read_start, state_of
from trialflow.platforms.base import TrialStatus
from trialflow.runs import start_run
from trialflow.steering.limit_changes import change_limits
from trialflow.steering.space_changes import change_search_space
from trialflow.tuning.asker import ask
from trialflow.tuning.pbt import UNASKED_ATTR

CONFIG = f"""\
searchSpace: {{x: {{_type: uniform, _value: [0, 1]}}}}
trialCommand: {sys.executable} -c pass
trialCodeDirectory: .
trialConcurrency: 2
maxTrialNumber: 4
tuner: {{name: Random}}
trainingService: {{platform: local}}
"""


@pytest.fixture
def experiment(tmp_path: Path, store) -> Experiment:
    (tmp_path / "config.yml").write_text(CONFIG)
    experiment = Experiment(load_config(tmp_path / "config.yml"), "estart", tmp_path / "work")
    start_run(experiment, store, "dag_a", "r1", {})
    return experiment


def test_a_first_start_finds_its_window_and_the_configs_space(experiment, store):
    state = read_start(experiment, store, "r1", 1)
    assert state.window == experiment.window(store, "r1")
    assert state.trial_index == state.window.first_index + 1
    assert state.max_trial_number is None and state.existing is None and state.unasked == frozenset()
    assert state.space_version == 0 and state.space is experiment.space


def test_a_retry_finds_its_trial_and_what_people_changed(experiment, store):
    asked = ask(store, experiment.experiment_id, 0, "t0", experiment.algorithm, experiment.space)
    change_limits(store, experiment.experiment_id, "ann", {"maxTrialNumber": 3})
    change_search_space(store, experiment.experiment_id, "ann", {"y": {"_type": "choice", "_value": [1, 2]}})
    store.set_experiment_attrs(experiment.experiment_id, {UNASKED_ATTR: [2, "3", None]})
    state = read_start(experiment, store, "r1", 0)
    assert state.existing is not None and state.existing.storage_id == asked.storage_id
    assert state.existing.parameters == asked.parameters
    assert state.max_trial_number == 3
    assert state.space_version == 1 and [p.sampler_name for p in state.space.params] == ["v1:y"]
    assert state.unasked == frozenset({2})  # what is not an index is not read as one
    assert read_start(experiment, store, "r1", 1).existing is None  # another index's trial is not this one's


def test_a_run_without_a_window_is_refused_whatever_trial_its_index_names(experiment, store):
    ask(store, experiment.experiment_id, 0, "t0", experiment.algorithm, experiment.space)
    state = read_start(experiment, store, "r-never-started", 0)
    assert not state.window.exists
    # the index a missing window gives is the experiment's first: its trial is still found, and
    # admission refuses the start for the window before it looks at the trial
    assert state.window.admission(0, None, lambda i: state.existing is not None) is not None


def test_the_start_reads_on_one_connection(experiment, store):
    ask(store, experiment.experiment_id, 0, "t0", experiment.algorithm, experiment.space)
    store.study_id(experiment.experiment_id)  # the id is cached once per store, as a task's is
    checkouts: list[object] = []

    def checked_out(*args: object) -> None:
        checkouts.append(args[0])

    engine = store.storage.engine
    sa.event.listen(engine, "checkout", checked_out)
    try:
        state = read_start(experiment, store, "r1", 0)
    finally:
        sa.event.remove(engine, "checkout", checked_out)
    assert state.existing is not None and state.generation is None  # not Population Based Training
    assert len(checkouts) == 1  # the attributes, the index and the trial's record on one


def test_a_pbt_start_reads_the_generation_before_with_its_experiment(tmp_path, store):
    """PBT waits for, and learns from, the generation before the trial's: read in the start's
    one call (two statements for the lot), not one lookup per member."""
    (tmp_path / "config.yml").write_text(
        CONFIG.replace("tuner: {name: Random}", "tuner: {name: PBTTuner, classArgs: {population_size: 3}}")
    )
    experiment = Experiment(load_config(tmp_path / "config.yml"), "epbtstart", tmp_path / "work")
    start_run(experiment, store, "dag_a", "r1", {})
    for i in range(2):  # the third member of generation 0 was never asked
        ask(store, experiment.experiment_id, i, f"t{i}", experiment.algorithm, experiment.space, population_floor=0)
    store.study_id(experiment.experiment_id)
    statements: list[str] = []

    def executed(conn, cursor, statement, *rest):
        statements.append(statement)

    sa.event.listen(store.storage.engine, "before_cursor_execute", executed)
    try:
        state = read_start(experiment, store, "r1", 3)  # generation 1's first member
    finally:
        sa.event.remove(store.storage.engine, "before_cursor_execute", executed)
    assert state.existing is None and state.generation is not None
    assert sorted(state.generation) == [0, 1, 2] and state.generation[2] is None
    assert [state.generation[i].trial_id for i in (0, 1)] == ["t0", "t1"]
    # the attributes, the indexes, one read of the members' rows and each of their tables:
    # one lookup per member took seven statements each
    assert len(statements) <= 8, statements
    assert read_start(experiment, store, "r1", 1).generation is None  # a trial asked already: a retry


def test_a_hybrid_start_reads_the_running_trials_with_its_experiment(tmp_path, store):
    """NNI's hybrid mode places a trial by the trials running now: read in the start's one call
    (one connection), and only where there is a choice to make."""
    (tmp_path / "config.yml").write_text(CONFIG)
    config = load_config(tmp_path / "config.yml").model_copy(deep=True)
    config.training_service = config.training_service * 2
    experiment = Experiment(config, "ehybridread", tmp_path / "work")
    start_run(experiment, store, "dag_a", "r1", {})
    running = ask(store, experiment.experiment_id, 0, "t0", experiment.algorithm, experiment.space)
    store.set_attrs(running.storage_id, service_index=1, handle={"platform": "local"})
    ended = ask(store, experiment.experiment_id, 1, "t1", experiment.algorithm, experiment.space)
    store.finish(ended.storage_id, TrialStatus.SUCCEEDED, 1.0)
    store.study_id(experiment.experiment_id)
    checkouts: list[object] = []

    def checked_out(*args: object) -> None:
        checkouts.append(args[0])

    sa.event.listen(store.storage.engine, "checkout", checked_out)
    try:
        state = read_start(experiment, store, "r1", 2)
    finally:
        sa.event.remove(store.storage.engine, "checkout", checked_out)
    assert len(checkouts) == 1
    assert state.active is not None and [t.trial_id for t in state.active] == ["t0"]  # the ended one is not
    assert experiment.choose_service(state.active, state.trial_index) == 0  # where fewer run


def test_a_start_with_one_platform_reads_no_running_trials(experiment, store):
    ask(store, experiment.experiment_id, 0, "t0", experiment.algorithm, experiment.space)
    assert read_start(experiment, store, "r1", 1).active is None


@pytest.mark.both_databases
def test_a_tasks_first_read_finds_the_study_with_its_attributes(experiment, store):
    """A trial task opens a store of its own: its first read names the study and reads the
    start's attributes in one statement (and the study's directions in the next), and an
    experiment that is not there is a KeyError that names it."""
    from trialflow.store.experiment_store import ExperimentStore

    asked = ask(store, experiment.experiment_id, 0, "t0", experiment.algorithm, experiment.space)
    fresh = ExperimentStore(store.url)
    statements: list[str] = []

    def executed(conn, cursor, statement, *rest):
        statements.append(statement)

    sa.event.listen(fresh.storage.engine, "before_cursor_execute", executed)
    state = read_start(experiment, fresh, "r1", 0)
    assert state.existing is not None and state.existing.storage_id == asked.storage_id
    assert state.window == experiment.window(store, "r1")
    studies = [s for s in statements if "studies" in s and "study_user_attributes" not in s]
    assert studies == [] and fresh.study_id(experiment.experiment_id) == store.study_id(experiment.experiment_id)
    statements.clear()  # the ask's Study then finds the directions read with the rest
    study_id = fresh.study_id(experiment.experiment_id)
    assert fresh.storage.get_study_directions(study_id) == store.storage.get_study_directions(study_id)
    assert statements == []
    gone = Experiment(experiment.config, "enot-there", experiment.workdir)
    with pytest.raises(KeyError, match="experiment 'enot-there' is not in the store"):
        read_start(gone, fresh, "r1", 0)


@pytest.mark.parametrize(
    ("limits", "expected"),
    [(None, None), ({}, None), ({"maxTrialNumber": 7}, 7), ("not a dict", None), ({"maxTrialNumber": None}, None)],
)
def test_state_of_reads_a_changed_max_trial_number(experiment, limits, expected):
    attrs = {} if limits is None else {"limits": limits}
    assert state_of(experiment, "r1", 0, attrs, None).max_trial_number == expected

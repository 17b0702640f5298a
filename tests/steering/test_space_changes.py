"""A search space changed while the experiment runs (trialflow.steering.space_changes, with
trialflow.tuning.space_versions): through the trial's real start, a real store and the local
platform."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

from tests.helpers.experiment_setup import experiment_with_store
from trialflow import queries, steering
from trialflow.lifecycle import trial_lifecycle
from trialflow.platforms.base import TrialStatus
from trialflow.runs import start_run
from trialflow.tuning.space_versions import VERSION_ATTR

CONFIG = f"""\
searchSpace:
  x: {{_type: uniform, _value: [0, 10]}}
  opt: {{_type: choice, _value: [sgd, adam, rmsprop]}}
trialCommand: {sys.executable} -c "pass"
trialCodeDirectory: .
trialConcurrency: 12
maxTrialNumber: 12
tuner: {{name: TPE, classArgs: {{optimize_mode: maximize, seed: 1, tpe_args: {{n_startup_jobs: 3}}}}}}
trainingService: {{platform: local}}
"""
NARROW = {"x": {"_type": "uniform", "_value": [2, 3]}, "opt": {"_type": "choice", "_value": ["sgd", "adam"]}}


@pytest.fixture
def setup(tmp_path: Path):
    experiment, store = experiment_with_store(
        tmp_path / "config.yml", CONFIG, "espace", tmp_path / "s.db", tmp_path / "work"
    )
    start_run(experiment, store, "dag_a", "r1", {})
    return experiment, store


def _run(experiment, store, index: int) -> dict:
    started = trial_lifecycle.start_trial(experiment, store, "r1", index)
    parameters = started.record.parameters
    value = -abs(parameters["x"] - 2.5) - (0 if parameters["opt"] == "adam" else 1)
    store.finish(started.record.storage_id, TrialStatus.SUCCEEDED, value)
    return parameters


def test_a_space_narrowed_at_trial_5_of_12_holds_every_later_trial(setup):
    experiment, store = setup
    before = [_run(experiment, store, i) for i in range(5)]
    assert any(not 2 <= p["x"] <= 3 or p["opt"] == "rmsprop" for p in before)  # the config's space
    version = steering.change_search_space(store, "espace", "alice", NARROW)
    assert (version.version, version.by, version.space) == (1, "alice", NARROW)
    after = [_run(experiment, store, i) for i in range(5, 12)]
    assert all(2 <= p["x"] <= 3 and p["opt"] in ("sgd", "adam") for p in after), after
    records = [store.find_trial("espace", i) for i in range(12)]
    assert [store.trial_attr(r.storage_id, VERSION_ATTR) for r in records] == [None] * 5 + [1] * 7
    lines = [(h["by"], h["action"], h["detail"]) for h in steering.history(store, "espace")]
    assert lines == [("alice", "change search space", "version 1: x, opt")]
    versions = steering.space_versions(store, "espace")
    assert [v.version for v in versions] == [0, 1] and versions[0].at is None and versions[1].at


@pytest.mark.parametrize(
    "space, words",
    [
        ("x", "searchSpace: expected a mapping of parameter name -> {_type, _value}, got str"),
        ({}, "got an empty mapping"),
        ({"x": {"_type": "uniform", "_value": [3]}}, "searchSpace.x._value:"),
        ({"x": {"_type": "bell", "_value": [0, 1]}}, "searchSpace.x._type: unknown type 'bell'"),
        ({"x": {"_type": "choice", "_value": []}}, "searchSpace.x._value: choice needs at least one option"),
    ],
)
def test_a_bad_space_is_refused_by_key_and_nothing_changes(setup, space, words):
    _, store = setup
    with pytest.raises(steering.BadInput) as refused:
        steering.change_search_space(store, "espace", "alice", space)
    assert words in str(refused.value)
    assert [v.version for v in steering.space_versions(store, "espace")] == [0]
    assert steering.history(store, "espace") == []


@pytest.mark.parametrize(
    "tuner, words",
    [
        ({"name": "GridSearch"}, "GridSearch runs its points in order"),
        ({"name": "PBTTuner"}, "PBTTuner runs its points in order"),
        ({"name": "GP"}, "searchSpace.x: GP does not support normal"),
    ],
)
def test_a_space_the_tuner_cannot_take_is_refused_with_validates_words(tuner, words):
    with pytest.raises(steering.BadInput, match=words):
        steering.check_space({"tuner": tuner}, {"x": {"_type": "normal", "_value": [0, 1]}})


def test_two_changes_at_once_are_two_versions(setup):
    _, store = setup
    threads = [
        threading.Thread(target=steering.change_search_space, args=(store, "espace", who, NARROW))
        for who in ("alice", "bob")
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    versions = steering.space_versions(store, "espace")
    assert [v.version for v in versions] == [0, 1, 2] and {v.by for v in versions[1:]} == {"alice", "bob"}


def test_an_experiment_whose_runs_are_over_is_refused(setup):
    _, store = setup
    steering.stop_experiment(store, "espace", "alice")
    with pytest.raises(steering.ActionRefused, match="not running|over|stopped"):
        steering.change_search_space(store, "espace", "alice", NARROW)


def test_the_table_the_charts_and_the_export_mark_trials_of_an_earlier_space(setup):
    """The earlier space's trials stay in every view, marked; the later ones are not, and no
    trial is marked before the space changes."""
    experiment, store = setup
    engine = store.storage.engine
    for i in range(3):
        _run(experiment, store, i)
    page = queries.trials_page(engine, "espace")
    assert page["space_versions"] == 0 and not any(r["earlier_space"] for r in page["rows"])
    steering.change_search_space(store, "espace", "alice", NARROW)
    for i in range(3, 5):
        _run(experiment, store, i)
    page = queries.trials_page(engine, "espace")
    assert page["space_versions"] == 1 and page["total"] == 5
    marks = {r["trial_index"]: (r["space_version"], r["earlier_space"]) for r in page["rows"]}
    assert marks == {0: (0, True), 1: (0, True), 2: (0, True), 3: (1, False), 4: (1, False)}
    # the same marks whichever way the page is found: a search and a parameter sort read kept rows
    searched = queries.trials_page(engine, "espace", search="x", sort="param:x")["rows"]
    assert {r["trial_index"]: r["earlier_space"] for r in searched} == {i: m[1] for i, m in marks.items()}
    charts = queries.chart_data(engine, "espace").as_dict()
    assert {t["trial_index"]: t["earlier_space"] for t in charts["trials"]} == {i: m[1] for i, m in marks.items()}
    exported = {r["trial_index"]: r["space_version"] for r in queries.export_json(engine, "espace")}
    assert exported == {i: m[0] for i, m in marks.items()}
    detail = queries.trial_detail(engine, "espace", 1)
    assert (detail["space_version"], detail["space_versions"], detail["earlier_space"]) == (0, 1, True)
    # a second change makes version 1's trials earlier too
    steering.change_search_space(store, "espace", "bob", {"x": {"_type": "uniform", "_value": [2, 2.5]}})
    assert all(r["earlier_space"] for r in queries.trials_page(engine, "espace")["rows"])

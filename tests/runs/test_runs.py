"""A run's start, summary and cancel, without Airflow: the rules the start and end steps,
`trialflow run` and a stop share."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from tests.helpers.experiment_setup import experiment_with_store
from trialflow.config import load_config
from trialflow.experiment import Experiment
from trialflow.lifecycle import trial_lifecycle
from trialflow.platforms.base import TrialStatus
from trialflow.platforms.local import process_alive
from trialflow.runs import ExperimentNotOwned, RunHasNoTrials, cancel_trials, start_run, summarize_run
from trialflow.store.experiment_store import ExperimentStore
from trialflow.trial.protocol import Metric
from trialflow.tuning.asker import ask

CONFIG = f"""\
searchSpace: {{x: {{_type: uniform, _value: [0, 1]}}}}
trialCommand: {sys.executable} -c "import time; time.sleep(60)"
trialCodeDirectory: .
trialConcurrency: 2
maxTrialNumber: 3
tuner: {{name: Random}}
trainingService: {{platform: local}}
"""


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Experiment, ExperimentStore]:
    return experiment_with_store(tmp_path / "config.yml", CONFIG, "erunlife", tmp_path / "s.db", tmp_path / "work")


def test_a_run_starts_once_and_a_cleared_run_keeps_its_window(setup):
    experiment, store = setup
    first = start_run(experiment, store, "dag_a", "r1", {})
    assert not first.resumed and (first.window.first_index, first.window.count) == (0, 3)
    again = start_run(experiment, store, "dag_a", "r1", {})
    assert again.resumed and again.window.first_index == 0
    assert store.experiment_attrs("erunlife")["dag_id"] == "dag_a"
    with pytest.raises(ExperimentNotOwned):
        start_run(experiment, store, "dag_b", "r9", {"experiment_id": "erunlife"})
    assert store.experiment_attrs("erunlife")["dag_id"] == "dag_a" and "run:r9" not in store.experiment_attrs(
        "erunlife"
    )


def test_the_summary_counts_the_runs_own_trials_and_fails_without_a_result(setup):
    experiment, store = setup
    with pytest.raises(RunHasNoTrials):
        summarize_run(experiment, store, "never-started", {})
    start_run(experiment, store, "dag_a", "r1", {})
    asked = [ask(store, "erunlife", i, f"erunlife-{i:04d}", experiment.algorithm, experiment.space) for i in range(3)]
    for a in asked:
        store.finish(a.storage_id, TrialStatus.FAILED, None, "boom")
    failed = summarize_run(experiment, store, "r1", {})
    assert failed.failure and "no trial of experiment erunlife succeeded" in failed.failure
    assert failed.summary["status_counts"] == {"FAILED": 3} and failed.best is None

    # a second run of the same study (its conf names it): indexes 3..5
    start_run(experiment, store, "dag_a", "r2", {"experiment_id": "erunlife"})
    a = ask(store, "erunlife", 3, "erunlife-0003", experiment.algorithm, experiment.space)
    store.record_metrics(a.storage_id, [Metric("FINAL", 0, 0.7)])
    store.close(a.storage_id, TrialStatus.SUCCEEDED)
    ok = summarize_run(experiment, store, "r2", {})
    assert ok.failure is None and ok.best is not None and ok.best.trial_index == 3
    assert [t["trial_index"] for t in ok.summary["trials"]] == [3]  # only its own window
    assert "* " in ok.table.splitlines()[1]


def test_cancel_stops_every_running_trial_and_closes_it(setup):
    experiment, store = setup
    start_run(experiment, store, "dag_a", "r1", {})
    started = [trial_lifecycle.start_trial(experiment, store, "r1", i) for i in range(2)]
    pids = [s.handle["pid"] for s in started]
    assert all(process_alive(pid) for pid in pids)
    assert cancel_trials(experiment, store, "stopped by a person") == 2
    deadline = time.monotonic() + 10
    while any(process_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(process_alive(pid) for pid in pids)
    rows = store.trial_rows("erunlife")
    assert [r.status for r in rows] == ["USER_CANCELED"] * 2 and rows[0].message == "stopped by a person"
    assert cancel_trials(experiment, store, "again") == 0


def test_a_stopped_run_says_who_stopped_it_in_the_summary_the_list_and_the_cli(setup):
    """Issue 36 (2): an experiment stopped by a person read "success" in the pages, the CLI and
    the end step; now its summary, the experiments list and `trialflow experiments` say who."""
    from trialflow import queries, steering
    from trialflow.cli.store_commands import _experiment_status

    experiment, store = setup
    start_run(experiment, store, "dag_a", "r1", {})
    asked = ask(store, "erunlife", 0, "erunlife-0000", experiment.algorithm, experiment.space)
    store.record_metrics(asked.storage_id, [Metric("FINAL", 0, 0.5)])
    store.close(asked.storage_id, TrialStatus.SUCCEEDED)
    assert summarize_run(experiment, store, "r1", {}).summary["stopped"] is None
    steering.stop_experiment(store, "erunlife", "ann")
    verdict = summarize_run(experiment, store, "r1", {})
    assert verdict.summary["stopped"]["by"] == "ann" and verdict.summary["stopped"]["reason"] == (
        "experiment stopped by ann"
    )
    assert any(note.startswith("Experiment erunlife was stopped by ann") for note in verdict.notes)
    (row,) = queries.list_experiments(store.engine)
    assert row.stopped is not None and row.stopped["by"] == "ann"
    assert queries.experiment_summary(store.engine, "erunlife")["stopped"]["by"] == "ann"
    assert _experiment_status(row.active, row.stopped).startswith("stopped by ann ")
    assert _experiment_status(False, None) == "finished" and _experiment_status(True, None) == "running"


def test_closing_the_last_run_drops_waiting_trials_and_resets_concurrency(setup):
    from trialflow import steering
    from trialflow.runs import close_run
    from trialflow.store.concurrency_changes import read_concurrency, write_concurrency

    experiment, store = setup
    start_run(experiment, store, "dag_a", "r1", {})
    for i in range(3):
        asked = ask(store, "erunlife", i, f"erunlife-{i:04d}", experiment.algorithm, experiment.space)
        store.record_metrics(asked.storage_id, [Metric("FINAL", 0, 0.5)])
        store.close(asked.storage_id, TrialStatus.SUCCEEDED)
    steering.add_trial(store, "erunlife", {"x": 0.5}, "ann")  # maxTrialNumber 3 -> 4: a follow-on run
    write_concurrency(store.engine, "dag_a", "erunlife", 4)
    going_on = summarize_run(experiment, store, "r1", {})
    assert not going_on.experiment_over  # the added trial's index is the next run's
    assert close_run(experiment, store, "dag_a", "r1", going_on).may_clean_up is False
    assert store.waiting_count("erunlife") == 1 and read_concurrency(store.engine, "dag_a") == 4
    store.set_experiment_attrs("erunlife", {"limits": {"maxTrialNumber": 3}})  # lowered: nothing goes on
    over = summarize_run(experiment, store, "r1", {})
    closed = close_run(experiment, store, "dag_a", "r1", over)
    assert over.experiment_over and closed.dropped == 1 and closed.concurrency_reset and closed.may_clean_up
    assert store.waiting_count("erunlife") == 0 and read_concurrency(store.engine, "dag_a") is None
    assert experiment.window(store, "r1").over


def test_a_whole_run_stopped_from_airflow_is_marked_once_and_resets_concurrency(setup):
    from trialflow import steering
    from trialflow.runs import stop_run
    from trialflow.store.concurrency_changes import read_concurrency, write_concurrency

    experiment, store = setup
    start_run(experiment, store, "dag_a", "r1", {})
    write_concurrency(store.engine, "dag_a", "erunlife", 4)
    for _ in range(3):  # every trial task of the run calls it
        stop_run(store, "erunlife", "dag_a", "r1", "Airflow", "DAG run r1 is failed")
    assert experiment.window(store, "r1").stopped["reason"] == "DAG run r1 is failed"
    assert [h["action"] for h in steering.history(store, "erunlife")] == ["stop run"]
    assert read_concurrency(store.engine, "dag_a") is None
    stop_run(store, "erunlife", "dag_a", "no-window", "Airflow", "x")  # nothing to stop: said, not raised


def test_a_run_stopped_before_any_trial_succeeded_fails_saying_who_stopped_it(setup):
    """Issue 46, 2: a failed run says it was stopped on purpose, not only that nothing succeeded."""
    from trialflow import steering

    experiment, store = setup
    start_run(experiment, store, "dag_a", "r1", {})
    asked = ask(store, "erunlife", 0, "erunlife-0000", experiment.algorithm, experiment.space)
    store.close(asked.storage_id, TrialStatus.USER_CANCELED, "killed by ann")
    steering.stop_experiment(store, "erunlife", "ann")
    verdict = summarize_run(experiment, store, "r1", {})
    assert verdict.failure is not None and verdict.failure.startswith(
        "experiment erunlife was stopped by ann (experiment stopped by ann) before any trial succeeded"
    ), verdict.failure


def test_the_end_step_of_a_run_whose_start_step_failed_says_it_never_started(setup):
    """Issue 46, 3: the end step raised a bare KeyError('Record does not exist.')."""
    import asyncio

    from trialflow.runs import end_run

    experiment, store = setup
    with pytest.raises(RunHasNoTrials, match="experiment erunlife never started: its start step failed"):
        asyncio.run(end_run(experiment, store, "dag_a", "r1", {}, {0: "upstream_failed"}))


def test_the_start_step_names_inputs_the_function_takes_no_argument_for(tmp_path):
    """Issue 46, 11: an input no parameter of the trial function takes was silently not passed."""
    from trialflow.runs.start import unused_inputs

    (tmp_path / "models.py").write_text("def svc(params, data):\n    return 1.0\n")
    (tmp_path / "f.yml").write_text(
        "searchSpace: {x: {_type: uniform, _value: [0, 1]}}\ntrialFunction: models:svc\ntrialCodeDirectory: .\n"
        "trialConcurrency: 1\nmaxTrialNumber: 1\ntuner: {name: Random}\ntrainingService: {platform: local}\n"
    )
    function = Experiment(load_config(tmp_path / "f.yml"), "efn", tmp_path / "work")
    [said] = unused_inputs(function, ["data", "scale"])
    assert said.startswith("models:svc: its signature takes no argument named 'scale'")
    assert unused_inputs(function, ["data"]) == [] and unused_inputs(function, []) == []
    (tmp_path / "config.yml").write_text(CONFIG)
    command = Experiment(load_config(tmp_path / "config.yml"), "ecmd", tmp_path / "work")
    assert unused_inputs(command, ["scale"]) == []  # a command reads what it likes from its environment

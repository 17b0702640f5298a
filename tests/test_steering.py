"""A person's kill and stop, without Airflow: the intent lands in the store, the follower of a
real local trial acts on it, and nothing of a stopped run starts afterwards."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from trialflow import lifecycle, steering
from trialflow.config import load_config
from trialflow.experiment import Experiment
from trialflow.platforms.background import run_sync
from trialflow.platforms.base import TrialStatus
from trialflow.platforms.local import process_alive
from trialflow.run_lifecycle import start_run
from trialflow.tuning.experiment_store import ExperimentStore, sqlite_url

CONFIG = f"""\
searchSpace: {{x: {{_type: uniform, _value: [0, 1]}}}}
trialCommand: {sys.executable} -c "import time; time.sleep(60)"
trialCodeDirectory: .
trialConcurrency: 2
maxTrialNumber: 4
tuner: {{name: Random}}
trainingService: {{platform: local}}
"""


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Experiment, ExperimentStore]:
    (tmp_path / "config.yml").write_text(CONFIG)
    experiment = Experiment(load_config(tmp_path / "config.yml"), "esteer", tmp_path / "work")
    store = ExperimentStore(sqlite_url(tmp_path / "s.db"))
    start_run(experiment, store, "dag_a", "r1", {})
    return experiment, store


def wait_gone(pid: int, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while process_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not process_alive(pid)


def test_a_kill_reaches_the_followed_trial_with_who_asked(setup):
    experiment, store = setup
    started = lifecycle.start_trial(experiment, store, "r1", 0)
    pid = started.handle["pid"]
    record = steering.kill_trial(store, "esteer", 0, "alice")
    assert record.trial_id == started.spec.trial_id
    outcome = lifecycle.wait_in_worker(started, store, 20, 0.2)
    assert outcome.status == TrialStatus.USER_CANCELED and outcome.message == "killed by alice"
    assert wait_gone(pid)
    result = lifecycle.finish_trial(store, started.record.storage_id, outcome.status, outcome.message)
    assert result.stopped_on_purpose  # the task is skipped, not failed: a person chose it
    row = store.trial_rows("esteer")[0]
    assert (row["status"], row["message"]) == ("USER_CANCELED", "killed by alice")
    history = steering.history(store, "esteer")
    assert [(h["by"], h["action"]) for h in history] == [("alice", "kill trial")]
    assert "trial 0" in history[0]["detail"]


def test_a_kill_of_an_unknown_or_ended_trial_is_refused_and_changes_nothing(setup):
    experiment, store = setup
    with pytest.raises(steering.ActionRefused, match="has no trial 3"):
        steering.kill_trial(store, "esteer", 3, "alice")
    with pytest.raises(steering.ActionRefused, match="no experiment 'nope'"):
        steering.kill_trial(store, "nope", 0, "alice")
    asked = store.ask("esteer", 0, "esteer-0000", experiment.algorithm, experiment.space)
    store.finish(asked.storage_id, TrialStatus.FAILED, None, "boom")
    with pytest.raises(steering.ActionRefused, match=r"already ended \(FAILED\)"):
        steering.kill_trial(store, "esteer", 0, "alice")
    assert store.trial_attr(asked.storage_id, steering.STOP_REQUEST) is None
    assert steering.history(store, "esteer") == []


def test_stopping_the_experiment_cancels_running_trials_and_starts_no_more(setup):
    experiment, store = setup
    started = [lifecycle.start_trial(experiment, store, "r1", i) for i in range(2)]
    stopped = steering.stop_experiment(store, "esteer", "bob")
    assert stopped.marked == ["r1"] and sorted(t.trial_index for t in stopped.asked) == [0, 1]
    outcomes = [lifecycle.wait_in_worker(s, store, 20, 0.2) for s in started]
    assert [o.status for o in outcomes] == [TrialStatus.USER_CANCELED] * 2
    assert all(o.message == "experiment stopped by bob" for o in outcomes)
    assert all(wait_gone(s.handle["pid"]) for s in started)
    with pytest.raises(lifecycle.TrialNotStarted, match="experiment stopped by bob"):
        lifecycle.start_trial(experiment, store, "r1", 2)
    assert store.find_trial_id("esteer", 2) is None  # never asked: it does not count
    assert experiment.window(store, "r1").stopped["by"] == "bob"
    # A second stop marks nothing again and asks nobody twice.
    again = steering.stop_runs(store, "esteer", "bob", "again")
    assert again.marked == [] and again.asked == []


def test_a_trial_asked_while_the_stop_came_is_cancelled_right_after_submit(setup, monkeypatch):
    """The stop marks the run, then lists running trials: a trial past its start check but not
    yet listed sees the mark when it re-reads its run after submitting."""
    experiment, store = setup
    real_window = experiment.window
    calls = []

    def window_then_stop(store_, run_id):
        window = real_window(store_, run_id)
        if not calls:  # the start check passes, and the stop lands right after it
            calls.append(1)
            steering.stop_runs(store, "esteer", "carol", "experiment stopped by carol")
        return window

    monkeypatch.setattr(experiment, "window", window_then_stop)
    started = lifecycle.start_trial(experiment, store, "r1", 0)
    assert started.finished and started.record.status == TrialStatus.USER_CANCELED
    assert started.record.message == "experiment stopped by carol"
    assert wait_gone(started.handle["pid"])


def test_stop_trial_closes_first_and_leaves_an_ended_trial_alone(setup):
    experiment, store = setup
    started = lifecycle.start_trial(experiment, store, "r1", 0)
    platform, handle, sid = started.platform, started.handle, started.record.storage_id
    assert run_sync(lifecycle.stop_trial(platform, store, handle, sid, "stopped from Airflow: its task was cleared"))
    assert wait_gone(handle["pid"])
    record = store.trial(sid)
    assert (record.status, record.message) == (TrialStatus.USER_CANCELED, "stopped from Airflow: its task was cleared")
    # The follower then sees the job end and the store keeps the stop's outcome.
    outcome = lifecycle.wait_in_worker(started, store, 20, 0.2)
    assert outcome.status is not None and outcome.status.is_terminal
    closed = lifecycle.finish_trial(store, sid, outcome.status, outcome.message)
    assert store.trial(sid).message == "stopped from Airflow: its task was cleared" and closed is not None
    assert not run_sync(lifecycle.stop_trial(platform, store, handle, sid, "again"))


def test_history_keeps_the_newest_entries(setup, monkeypatch):
    _, store = setup
    monkeypatch.setattr(steering, "HISTORY_LIMIT", 3)
    for i in range(5):
        steering.record_action(store, "esteer", "dave", "note", str(i))
    assert [h["detail"] for h in steering.history(store, "esteer")] == ["2", "3", "4"]


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({}, "nothing to change"),
        ({"trialConcurrency": 0}, "trialConcurrency: expected a whole number 1..10000, got 0"),
        ({"trialConcurrency": True}, "trialConcurrency: expected a whole number"),
        ({"trialConcurrency": 2.5}, "trialConcurrency: expected a whole number"),
        ({"maxTrialNumber": -3}, "maxTrialNumber: expected a whole number 1..2147483647, got -3"),
        ({"maxTrialNumber": 2**40}, "maxTrialNumber: expected a whole number 1..2147483647"),
        ({"maxExperimentDuration": "-1h"}, "maxExperimentDuration: expected a duration"),
        ({"maxExperimentDuration": 0}, "maxExperimentDuration: expected a positive, finite duration"),
        ({"maxTrialDuration": "1h"}, "maxTrialDuration: not a limit one can change"),
    ],
)
def test_bad_limits_are_refused_by_key_and_change_nothing(setup, changes, words):
    _, store = setup
    before = store.experiment_attrs("esteer")
    with pytest.raises(steering.ActionRefused, match=words.replace("(", r"\(").replace(")", r"\)")):
        steering.change_limits(store, "esteer", "alice", changes)
    assert store.experiment_attrs("esteer") == before


def test_a_lowered_max_trial_number_skips_trials_not_started(setup):
    experiment, store = setup
    started = lifecycle.start_trial(experiment, store, "r1", 0)
    limits = steering.change_limits(store, "esteer", "alice", {"maxTrialNumber": 1})
    assert limits["maxTrialNumber"] == 1 and limits["trialConcurrency"] == 2  # the config's, unchanged
    with pytest.raises(lifecycle.TrialNotStarted, match=r"maxTrialNumber is 1 \(changed while the experiment ran\)"):
        lifecycle.start_trial(experiment, store, "r1", 1)
    again = lifecycle.start_trial(experiment, store, "r1", 0)  # a retry of a started one re-attaches
    assert again.resumed and again.handle["pid"] == started.handle["pid"]
    assert experiment.continuation(store, "r1").run_id is None
    started.platform.cancel_sync(started.handle, TrialStatus.USER_CANCELED, "test over")
    assert [h["detail"] for h in steering.history(store, "esteer")] == ["maxTrialNumber 1"]


def test_a_raised_max_trial_number_goes_on_in_a_follow_on_run(setup):
    experiment, store = setup
    assert experiment.continuation(store, "r1").run_id is None  # maxTrialNumber 4: all in this run
    steering.change_limits(store, "esteer", "alice", {"maxTrialNumber": 10})
    following = experiment.continuation(store, "r1")
    assert following.run_id is not None and "maxTrialNumber raised to 10: trials 4.." in following.reason
    start_run(experiment, store, "dag_a", following.run_id, following.conf)
    assert experiment.window(store, following.run_id).first_index == 4
    assert experiment.continuation(store, following.run_id).run_id is not None  # 8 < 10: one more
    start_run(experiment, store, "dag_a", "r3", {"experiment_id": "esteer", "continues": following.run_id})
    assert "maxTrialNumber (10) reached" in experiment.continuation(store, "r3").reason
    with pytest.raises(lifecycle.TrialNotStarted, match="maxTrialNumber is 10"):
        lifecycle.start_trial(experiment, store, "r3", 2)  # index 10


def test_a_shortened_duration_reaches_the_running_trial(setup):
    experiment, store = setup
    started = lifecycle.start_trial(experiment, store, "r1", 0)
    window = experiment.window(store, "r1")
    assert window.deadline is None  # the config has no maxExperimentDuration
    steering.change_limits(store, "esteer", "alice", {"maxExperimentDuration": "1s"})
    moved = experiment.window(store, "r1")
    assert moved.deadline == pytest.approx(store.experiment_attr("esteer", "run:r1")["started_at"] + 1)
    outcome = lifecycle.wait_in_worker(started, store, 20, 0.2)
    assert outcome.status == TrialStatus.SYS_CANCELED and outcome.message == "maxExperimentDuration reached"
    assert wait_gone(started.handle["pid"])
    with pytest.raises(lifecycle.TrialNotStarted, match="maxExperimentDuration reached"):
        lifecycle.start_trial(experiment, store, "r1", 1)
    # Lengthened again: the deadline moves by as much, from the run's start.
    steering.change_limits(store, "esteer", "alice", {"maxExperimentDuration": "1h"})
    assert experiment.window(store, "r1").deadline == pytest.approx(moved.deadline + 3599)
    assert steering.limits(store, "esteer")["maxExperimentDuration"] == 3600.0

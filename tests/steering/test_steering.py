"""A person's kill and stop, without Airflow: the intent lands in the store, the follower of a
real local trial acts on it, and nothing of a stopped run starts afterwards."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from tests.helpers.experiment_setup import experiment_with_store
from trialflow import steering
from trialflow.config import load_config
from trialflow.experiment import Experiment
from trialflow.lifecycle import trial_lifecycle
from trialflow.platforms.base import TrialStatus
from trialflow.platforms.event_loop import run_sync
from trialflow.platforms.local import process_alive
from trialflow.runs import allot_window, continuation, mark_ended, next_run_id, start_run
from trialflow.store.experiment_store import ExperimentStore, sqlite_url
from trialflow.tuning.asker import ask

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
    experiment, store = experiment_with_store(
        tmp_path / "config.yml", CONFIG, "esteer", tmp_path / "s.db", tmp_path / "work"
    )
    start_run(experiment, store, "dag_a", "r1", {})
    return experiment, store


def wait_gone(pid: int, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while process_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not process_alive(pid)


def test_a_kill_reaches_the_followed_trial_with_who_asked(setup):
    experiment, store = setup
    started = trial_lifecycle.start_trial(experiment, store, "r1", 0)
    pid = started.handle["pid"]
    record = steering.kill_trial(store, "esteer", 0, "alice")
    assert record.trial_id == started.spec.trial_id
    outcome = trial_lifecycle.wait_in_worker(started, store, 20, 0.2)
    assert outcome.status == TrialStatus.USER_CANCELED and outcome.message == "killed by alice"
    assert wait_gone(pid)
    result = trial_lifecycle.finish_trial(store, started.record.storage_id, outcome.status, outcome.message)
    assert result.stopped_on_purpose  # the task is skipped, not failed: a person chose it
    row = store.trial_rows("esteer")[0]
    assert (row.status, row.message) == ("USER_CANCELED", "killed by alice")
    history = steering.history(store, "esteer")
    assert [(h["by"], h["action"]) for h in history] == [("alice", "kill trial")]
    assert "trial 0" in history[0]["detail"]


def test_a_kill_of_an_unknown_or_ended_trial_is_refused_and_changes_nothing(setup):
    experiment, store = setup
    with pytest.raises(steering.ActionRefused, match="has no trial 3"):
        steering.kill_trial(store, "esteer", 3, "alice")
    with pytest.raises(steering.ActionRefused, match="no experiment 'nope'"):
        steering.kill_trial(store, "nope", 0, "alice")
    asked = ask(store, "esteer", 0, "esteer-0000", experiment.algorithm, experiment.space)
    store.finish(asked.storage_id, TrialStatus.FAILED, None, "boom")
    with pytest.raises(steering.ActionRefused, match=r"already ended \(FAILED\)"):
        steering.kill_trial(store, "esteer", 0, "alice")
    assert store.trial_attr(asked.storage_id, steering.STOP_REQUEST) is None
    assert steering.history(store, "esteer") == []


def test_stopping_the_experiment_cancels_running_trials_and_starts_no_more(setup):
    experiment, store = setup
    started = [trial_lifecycle.start_trial(experiment, store, "r1", i) for i in range(2)]
    stopped = steering.stop_experiment(store, "esteer", "bob")
    assert stopped.marked == ["r1"] and sorted(t.trial_index for t in stopped.asked) == [0, 1]
    outcomes = [trial_lifecycle.wait_in_worker(s, store, 20, 0.2) for s in started]
    assert [o.status for o in outcomes] == [TrialStatus.USER_CANCELED] * 2
    assert all(o.message == "experiment stopped by bob" for o in outcomes)
    assert all(wait_gone(s.handle["pid"]) for s in started)
    with pytest.raises(trial_lifecycle.TrialNotStarted, match="experiment stopped by bob"):
        trial_lifecycle.start_trial(experiment, store, "r1", 2)
    assert store.find_trial_id("esteer", 2) is None  # never asked: it does not count
    assert experiment.window(store, "r1").stopped["by"] == "bob"
    # A second stop marks nothing again and asks nobody twice (nor adds a history line).
    again = steering.stop_runs(store, "esteer", "bob", "again", action="stop run")
    assert again.marked == [] and again.asked == []
    assert [h["action"] for h in steering.history(store, "esteer")] == ["stop experiment"]


def test_a_run_stopped_with_a_history_line_has_it_with_the_mark(setup):
    experiment, store = setup
    start_run(experiment, store, "dag_a", "r2", {"experiment_id": "esteer"})  # a second run of it
    steering.record_action(store, "esteer", "alice", "note", "before")
    stopped = steering.stop_runs(store, "esteer", "Airflow", "DAG run r2 is failed", ["r2"], action="stop run")
    assert stopped.marked == ["r2"] and experiment.window(store, "r1").stopped is None
    assert [(h["by"], h["action"], h["detail"]) for h in steering.history(store, "esteer")] == [
        ("alice", "note", "before"),
        ("Airflow", "stop run", "DAG run r2 is failed"),
    ]
    with pytest.raises(steering.UnknownTarget, match="has no run nope"):
        steering.stop_runs(store, "esteer", "Airflow", "x", ["nope"])


def test_a_trial_asked_while_the_stop_came_is_cancelled_right_after_submit(setup, monkeypatch):
    """The stop marks the run, then lists running trials: a trial past its start check but not
    yet listed sees the mark when it re-reads its run after submitting."""
    experiment, store = setup
    real_read = trial_lifecycle.read_start
    calls = []

    def read_then_stop(*args, **kwargs):
        state = real_read(*args, **kwargs)
        if not calls:  # the start check passes, and the stop lands right after it
            calls.append(1)
            steering.stop_runs(store, "esteer", "carol", "experiment stopped by carol")
        return state

    monkeypatch.setattr(trial_lifecycle, "read_start", read_then_stop)
    started = trial_lifecycle.start_trial(experiment, store, "r1", 0)
    assert started.finished and started.record.status == TrialStatus.USER_CANCELED
    assert started.record.message == "experiment stopped by carol"
    assert wait_gone(started.handle["pid"])


def test_stop_trial_closes_first_and_leaves_an_ended_trial_alone(setup):
    experiment, store = setup
    started = trial_lifecycle.start_trial(experiment, store, "r1", 0)
    platform, handle, sid = started.platform, started.handle, started.record.storage_id
    assert run_sync(
        trial_lifecycle.stop_trial(platform, store, handle, sid, "stopped from Airflow: its task was cleared")
    )
    assert wait_gone(handle["pid"])
    record = store.trial(sid)
    assert (record.status, record.message) == (TrialStatus.USER_CANCELED, "stopped from Airflow: its task was cleared")
    # The follower then sees the job end and the store keeps the stop's outcome.
    outcome = trial_lifecycle.wait_in_worker(started, store, 20, 0.2)
    assert outcome.status is not None and outcome.status.is_terminal
    closed = trial_lifecycle.finish_trial(store, sid, outcome.status, outcome.message)
    assert store.trial(sid).message == "stopped from Airflow: its task was cleared" and closed is not None
    assert not run_sync(trial_lifecycle.stop_trial(platform, store, handle, sid, "again"))


def test_history_keeps_the_newest_entries(setup, monkeypatch):
    _, store = setup
    monkeypatch.setattr(steering.base, "HISTORY_LIMIT", 3)
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
    started = trial_lifecycle.start_trial(experiment, store, "r1", 0)
    limits = steering.change_limits(store, "esteer", "alice", {"maxTrialNumber": 1})
    assert limits["maxTrialNumber"] == 1 and limits["trialConcurrency"] == 2  # the config's, unchanged
    with pytest.raises(
        trial_lifecycle.TrialNotStarted, match=r"maxTrialNumber is 1 \(changed while the experiment ran\)"
    ):
        trial_lifecycle.start_trial(experiment, store, "r1", 1)
    again = trial_lifecycle.start_trial(experiment, store, "r1", 0)  # a retry of a started one re-attaches
    assert again.resumed and again.handle["pid"] == started.handle["pid"]
    assert continuation(experiment, store, "r1").run_id is None
    started.platform.cancel_sync(started.handle, TrialStatus.USER_CANCELED, "test over")
    assert [h["detail"] for h in steering.history(store, "esteer")] == ["maxTrialNumber 1"]


def test_a_raised_max_trial_number_goes_on_in_a_follow_on_run(setup):
    experiment, store = setup
    assert continuation(experiment, store, "r1").run_id is None  # maxTrialNumber 4: all in this run
    steering.change_limits(store, "esteer", "alice", {"maxTrialNumber": 10})
    following = continuation(experiment, store, "r1")
    assert following.run_id is not None and "maxTrialNumber raised to 10: trials 4.." in following.reason
    assert next_run_id(experiment, store, "r1") == following.run_id  # the run `trialflow run` follows
    start_run(experiment, store, "dag_a", following.run_id, following.conf)
    assert experiment.window(store, following.run_id).first_index == 4
    assert continuation(experiment, store, following.run_id).run_id is not None  # 8 < 10: one more
    start_run(experiment, store, "dag_a", "r3", {"experiment_id": "esteer", "continues": following.run_id})
    assert "maxTrialNumber (10) reached" in continuation(experiment, store, "r3").reason
    window = experiment.window(store, "r3")
    assert (window.first_index, window.count) == (8, 2)  # only what the limit leaves: 8 and 9
    with pytest.raises(trial_lifecycle.TrialNotStarted, match=r"this run holds 2 trial\(s\)"):
        trial_lifecycle.start_trial(experiment, store, "r3", 2)  # its third task: no index is taken for it


def test_trial_indexes_are_never_skipped_when_trials_are_added_and_the_limit_raised(setup):
    """Issue 36 (2): an added trial raised maxTrialNumber to 31; the follow-on run took a whole
    fan-out of indexes, ran one and skipped the next, so a later raise began past the gap and the
    page showed "44 / 45" forever. Each run now holds only what the limit leaves."""
    experiment, store = setup  # maxTrialNumber 4: r1 holds 0..3
    steering.add_trial(store, "esteer", {"x": 0.5}, "ann")  # the limit becomes 5
    following = continuation(experiment, store, "r1")
    start_run(experiment, store, "dag_a", following.run_id, following.conf)
    window = experiment.window(store, following.run_id)
    assert (window.first_index, window.count) == (4, 1)
    steering.change_limits(store, "esteer", "ann", {"maxTrialNumber": 8})  # raised while it runs
    after = continuation(experiment, store, following.run_id)
    start_run(experiment, store, "dag_a", after.run_id, after.conf)
    assert (experiment.window(store, after.run_id).first_index, experiment.window(store, after.run_id).count) == (
        5,
        3,
    )
    windows = sorted(steering.run_windows(store, "esteer").values(), key=lambda w: w.first_index)
    held = [i for w in windows for i in range(w.first_index, w.first_index + w.count)]
    assert held == list(range(8))  # every index up to the limit, once, no gap


@pytest.mark.slow
def test_a_shortened_duration_reaches_the_running_trial(setup):
    experiment, store = setup
    started = trial_lifecycle.start_trial(experiment, store, "r1", 0)
    window = experiment.window(store, "r1")
    assert window.deadline is None  # the config has no maxExperimentDuration
    steering.change_limits(store, "esteer", "alice", {"maxExperimentDuration": "1s"})
    moved = experiment.window(store, "r1")
    assert moved.deadline == pytest.approx(store.experiment_attr("esteer", "run:r1")["started_at"] + 1)
    outcome = trial_lifecycle.wait_in_worker(started, store, 20, 0.2)
    assert outcome.status == TrialStatus.SYS_CANCELED and outcome.message == "maxExperimentDuration reached"
    assert wait_gone(started.handle["pid"])
    with pytest.raises(trial_lifecycle.TrialNotStarted, match="maxExperimentDuration reached"):
        trial_lifecycle.start_trial(experiment, store, "r1", 1)
    # Lengthened again: the deadline moves by as much, from the run's start.
    steering.change_limits(store, "esteer", "alice", {"maxExperimentDuration": "1h"})
    assert experiment.window(store, "r1").deadline == pytest.approx(moved.deadline + 3599)
    assert steering.limits(store, "esteer")["maxExperimentDuration"] == 3600.0


def test_a_trial_with_chosen_parameters_runs_next_exactly_and_the_tuner_sees_it(setup):
    experiment, store = setup
    with pytest.raises(steering.ActionRefused, match=r"parameters.x: expected a number in \[0, 1\] \(uniform\), got 3"):
        steering.add_trial(store, "esteer", {"x": 3}, "alice")
    with pytest.raises(steering.ActionRefused, match="parameters.y: not in the search space"):
        steering.add_trial(store, "esteer", {"x": 0.5, "y": 1}, "alice")
    assert store.waiting_trials("esteer") == [] and steering.history(store, "esteer") == []
    steering.add_trial(store, "esteer", {"x": 0.123456789}, "alice")
    assert steering.limits(store, "esteer")["maxTrialNumber"] == 5  # the tuner keeps its 4
    asked = ask(store, "esteer", 0, "esteer-0000", experiment.algorithm, experiment.space)
    assert asked.parameters == {"x": 0.123456789}
    frozen = store.storage.get_trial(asked.storage_id)
    assert frozen.params == {"x": 0.123456789}  # what TPE and the others learn from
    assert frozen.user_attrs["asked_by"]["reason"] == "added by alice"
    again = ask(store, "esteer", 0, "esteer-0000", experiment.algorithm, experiment.space)
    assert again.resumed and again.parameters == asked.parameters  # a retry: the same trial
    other = ask(store, "esteer", 1, "esteer-0001", experiment.algorithm, experiment.space)
    assert (
        other.parameters != asked.parameters and "asked_by" not in store.storage.get_trial(other.storage_id).user_attrs
    )
    assert [h["action"] for h in steering.history(store, "esteer")] == ["add trial"]


def test_rerun_failed_trials_queues_each_once_with_its_parameters(setup):
    experiment, store = setup
    asked = [ask(store, "esteer", i, f"esteer-{i:04d}", experiment.algorithm, experiment.space) for i in range(3)]
    with pytest.raises(steering.ActionRefused, match="has no failed, killed or stopped trial to re-run"):
        steering.rerun_trials(store, "esteer", "bob")
    store.finish(asked[0].storage_id, TrialStatus.FAILED, None, "boom")
    # issue 36 (2): a killed (or early-stopped) trial is re-run as a failed one is
    store.finish(asked[2].storage_id, TrialStatus.USER_CANCELED, None, "killed by ann")
    with pytest.raises(steering.ActionRefused, match="is still WAITING"):
        steering.rerun_trials(store, "esteer", "bob", [1])
    assert steering.rerun_trials(store, "esteer", "bob") == [0, 2]
    waiting = steering.waiting_trials(store, "esteer")
    assert [w["parameters"] for w in waiting] == [asked[0].parameters, asked[2].parameters]
    assert [w["reason"] for w in waiting] == ["re-run of trial 0 by bob", "re-run of trial 2 by bob"]
    new = [ask(store, "esteer", i, f"esteer-{i:04d}", experiment.algorithm, experiment.space) for i in (3, 4, 5)]
    assert [n.parameters for n in new[:2]] == [asked[0].parameters, asked[2].parameters]
    assert store.waiting_trials("esteer") == []
    assert new[2].parameters not in (asked[0].parameters, asked[2].parameters)  # the tuner's again
    assert store.find_trial("esteer", 0).status == TrialStatus.FAILED  # the old one stays
    for record in new:
        store.finish(record.storage_id, TrialStatus.SUCCEEDED, 0.5)
    store.finish(asked[1].storage_id, TrialStatus.SUCCEEDED, 0.5)
    store.finish(asked[0].storage_id, TrialStatus.SUCCEEDED, 0.5)  # closed already: stays FAILED
    assert steering.rerun_trials(store, "esteer", "bob", [1]) == [1]  # an ended one, by index
    with pytest.raises(steering.UnknownTarget, match="has no trial 99"):
        steering.rerun_trials(store, "esteer", "bob", [99])


def test_asked_for_trials_run_once_each_when_trials_start_together(setup):
    """Eight trial indexes asked at once from eight threads, three trials queued: each queued
    trial runs exactly once (the store's conditional claim settles it)."""
    import threading

    experiment, store = setup
    for x in (0.11, 0.22, 0.33):
        steering.add_trial(store, "esteer", {"x": x}, "carol")
    results: dict[int, dict] = {}
    barrier = threading.Barrier(8)

    def start(i: int) -> None:
        barrier.wait()
        results[i] = ask(store, "esteer", i, f"esteer-{i:04d}", experiment.algorithm, experiment.space).parameters

    threads = [threading.Thread(target=start, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    chosen = sorted(p["x"] for p in results.values() if p["x"] in (0.11, 0.22, 0.33))
    assert chosen == [0.11, 0.22, 0.33] and len(results) == 8
    assert store.waiting_trials("esteer") == []


def test_point_tuners_refuse_a_trial_of_ones_own(tmp_path, store):
    (tmp_path / "config.yml").write_text(
        CONFIG.replace("tuner: {name: Random}", "tuner: {name: GridSearch}")
        .replace("{_type: uniform, _value: [0, 1]}", "{_type: choice, _value: [1, 2]}")
        .replace("maxTrialNumber: 4\n", "")
    )
    experiment = Experiment(load_config(tmp_path / "config.yml"), "egrid", tmp_path / "work")
    start_run(experiment, store, "dag_a", "r1", {})
    with pytest.raises(steering.ActionRefused, match="GridSearch runs its points in order"):
        steering.add_trial(store, "egrid", {"x": 1}, "dave")


@pytest.mark.both_databases
def test_actions_at_once_each_keep_their_history_line(store, tmp_path):
    """Issue 36 (2): twenty actions from two editors at once wrote 13 history lines (the history
    was read, appended to and written back). Each is kept, on SQLite and PostgreSQL."""
    import threading

    (tmp_path / "config.yml").write_text(CONFIG)
    experiment = Experiment(load_config(tmp_path / "config.yml"), "ehistory", tmp_path / "work")
    start_run(experiment, store, "dag_a", "r1", {})
    barrier = threading.Barrier(20)

    def act(i: int) -> None:
        barrier.wait()
        steering.record_action(store, "ehistory", f"editor{i % 2}", "test", f"action {i}")

    threads = [threading.Thread(target=act, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    details = sorted(h["detail"] for h in steering.history(store, "ehistory") if h["action"] == "test")
    assert details == sorted(f"action {i}" for i in range(20))


@pytest.mark.both_databases
def test_twenty_trials_added_at_once_raise_max_trial_number_by_twenty(store, tmp_path):
    """Issue 36 (2): twenty add-trials at once from two editors queued twenty trials but raised
    maxTrialNumber by 8 (the limits were read, changed and written back)."""
    import threading

    (tmp_path / "config.yml").write_text(CONFIG)
    experiment = Experiment(load_config(tmp_path / "config.yml"), "eadded", tmp_path / "work")
    start_run(experiment, store, "dag_a", "r1", {})
    barrier = threading.Barrier(20)

    def add(i: int) -> None:
        barrier.wait()
        steering.add_trial(store, "eadded", {"x": i / 20}, f"editor{i % 2}")

    threads = [threading.Thread(target=add, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert steering.limits(store, "eadded")["maxTrialNumber"] == 4 + 20
    assert len(steering.waiting_trials(store, "eadded")) == 20
    assert len([h for h in steering.history(store, "eadded") if h["action"] == "add trial"]) == 20


def test_a_huge_duration_is_refused_and_a_later_one_counts_from_the_runs_start(setup):
    """Issue 36 (2): maxExperimentDuration 1e308 and then "4h" left the deadline in 1970 (the old
    deadline minus the old duration plus the new one, in floats) and cancelled every trial."""
    experiment, store = setup
    started_at = store.experiment_attrs("esteer")["run:r1"]["started_at"]
    for huge in (1e308, "100000d", 10**12):
        with pytest.raises(steering.BadInput, match="maxExperimentDuration: expected at most 3660 days"):
            steering.change_limits(store, "esteer", "ann", {"maxExperimentDuration": huge})
    steering.change_limits(store, "esteer", "ann", {"maxExperimentDuration": "3000d"})
    assert experiment.window(store, "r1").deadline == pytest.approx(started_at + 3000 * 86400)
    steering.change_limits(store, "esteer", "ann", {"maxExperimentDuration": "4h"})
    assert experiment.window(store, "r1").deadline == pytest.approx(started_at + 4 * 3600)
    # a follow-on run counts from the first run's start, not its own
    later = allot_window(experiment, store, "r2", now=started_at + 100, continues="r1")
    assert later.deadline == pytest.approx(started_at + 4 * 3600)
    steering.change_limits(store, "esteer", "ann", {"maxExperimentDuration": "1h"})
    assert experiment.window(store, "r2").deadline == pytest.approx(started_at + 3600)


def test_a_trial_starting_while_the_deadline_moves_sees_the_new_one(setup, monkeypatch):
    """Issue 36 (2): a deadline change made while trials were starting missed three of them
    (each read its run's window once, before asking the tuner; the change reaches only the
    trials already in the store)."""
    experiment, store = setup
    started_at = store.experiment_attrs("esteer")["run:r1"]["started_at"]
    real_ask = trial_lifecycle.ask_new

    def ask_after_a_change(*args, **kwargs):
        steering.change_limits(store, "esteer", "ann", {"maxExperimentDuration": "2h"})
        return real_ask(*args, **kwargs)

    monkeypatch.setattr(trial_lifecycle, "ask_new", ask_after_a_change)
    started = trial_lifecycle.start_trial(experiment, store, "r1", 0)
    try:
        assert started.experiment_deadline == pytest.approx(started_at + 2 * 3600)
    finally:
        started.platform.cancel_sync(started.handle, TrialStatus.USER_CANCELED, "test over")


def test_a_trial_added_by_hand_says_so_everywhere(setup):
    """Issue 36 (2): NNI wrote ``parameter_source: customized`` in parameter.cfg for a trial
    added with chosen parameters; trialflow wrote "algorithm". Now the trial's file, the trial
    table, the trial page's detail and the export say who chose the parameters."""
    import csv
    import io
    import json

    from trialflow import queries

    experiment, store = setup
    steering.add_trial(store, "esteer", {"x": 0.25}, "ann")
    added = trial_lifecycle.start_trial(experiment, store, "r1", 0)  # takes the queued trial
    tuned = trial_lifecycle.start_trial(experiment, store, "r1", 1)
    try:
        files = {s.spec.trial_id: Path(s.handle["trial_dir"]) / "parameter.cfg" for s in (added, tuned)}
        cfg = {k: json.loads(v.read_text()) for k, v in files.items()}
        assert cfg[added.spec.trial_id]["parameter_source"] == "customized"
        assert cfg[added.spec.trial_id]["parameters"] == {"x": 0.25}
        assert cfg[tuned.spec.trial_id]["parameter_source"] == "algorithm"
        rows = {r["trial_index"]: r for r in queries.trials_page(store.engine, "esteer")["rows"]}
        assert (rows[0]["parameter_source"], rows[0]["added_by"]) == ("customized", "ann")
        assert (rows[1]["parameter_source"], rows[1]["added_by"]) == ("algorithm", None)
        assert queries.trial_detail(store.engine, "esteer", 0)["parameter_source"] == "customized"
        exported = list(csv.DictReader(io.StringIO(queries.export_csv(store.engine, "esteer"))))
        assert [(r["parameter_source"], r["added_by"]) for r in exported] == [("customized", "ann"), ("algorithm", "")]
        assert experiment.platform().render(added.spec)["parameter.cfg"]["parameter_source"] == "customized"
    finally:
        for s in (added, tuned):
            s.platform.cancel_sync(s.handle, TrialStatus.USER_CANCELED, "test over")


def test_an_added_trial_with_several_bad_parameters_hears_of_every_one(tmp_path, store):
    """Issue 36 (2): the add-trial form reported the first invalid parameter only."""
    (tmp_path / "config.yml").write_text(
        CONFIG.replace(
            "searchSpace: {x: {_type: uniform, _value: [0, 1]}}",
            "searchSpace: {x: {_type: uniform, _value: [0, 1]}, n: {_type: randint, _value: [1, 4]}, "
            "opt: {_type: choice, _value: [{_name: sgd, lr: {_type: loguniform, _value: [0.001, 0.1]}}, adam]}}",
        )
    )
    experiment = Experiment(load_config(tmp_path / "config.yml"), "ebad", tmp_path / "work")
    start_run(experiment, store, "dag_a", "r1", {})
    with pytest.raises(steering.BadInput) as refused:
        steering.add_trial(store, "ebad", {"x": 2, "n": 1.5, "opt": {"_name": "sgd", "lr": 5}, "zz": 1}, "ann")
    assert str(refused.value) == "; ".join(
        [
            "parameters.zz: not in the search space; expected n, opt, x",
            "parameters.x: expected a number in [0, 1] (uniform), got 2",
            "parameters.n: expected a whole number in [1, 4) (randint), got 1.5",
            "parameters.opt.lr: expected a number in [0.001, 0.1] (loguniform), got 5",
        ]
    )
    assert steering.waiting_trials(store, "ebad") == []  # nothing queued
    many = {f"k{i:04d}": 1 for i in range(1000)}
    with pytest.raises(steering.BadInput, match=r"; and 983 more$"):
        steering.add_trial(store, "ebad", many, "ann")


def test_after_its_runs_are_over_every_action_is_refused_and_nothing_changes(setup):
    """Issue 36 (2): the CLI's `limits --max-trials` restarted a finished experiment while its
    page offered nothing. One rule everywhere: actions act on a running experiment."""
    experiment, store = setup
    asked = ask(store, "esteer", 0, "esteer-0000", experiment.algorithm, experiment.space)
    store.finish(asked.storage_id, TrialStatus.FAILED, None, "boom")
    mark_ended(experiment, store, "r1")
    before = store.experiment_attrs("esteer")
    for action in (
        lambda: steering.change_limits(store, "esteer", "ann", {"maxTrialNumber": 20}),
        lambda: steering.add_trial(store, "esteer", {"x": 0.5}, "ann"),
        lambda: steering.rerun_trials(store, "esteer", "ann"),
        lambda: steering.stop_experiment(store, "esteer", "ann"),
    ):
        with pytest.raises(steering.NotRunning, match="is not running"):
            action()
    assert store.experiment_attrs("esteer") == before
    allot_window(experiment, store, "r1")  # the run cleared and started again: running once more
    assert steering.change_limits(store, "esteer", "ann", {"maxTrialNumber": 20})["maxTrialNumber"] == 20


def test_a_click_on_a_trial_task_is_recorded_beside_its_trial(setup):
    """What the api-server's listener writes for Airflow's mark failed / success on a trial
    task: the stop request of the trial that task runs, once, and only while it runs."""
    experiment, store = setup
    started = trial_lifecycle.start_trial(experiment, store, "r1", 1)
    try:
        assert steering.stop_task_trial(store, "dag_a", "r1", 0, "x") is None  # never started
        assert steering.stop_task_trial(store, "dag_a", "r9", 1, "x") is None  # no such run
        assert steering.stop_task_trial(store, "dag_b", "r1", 1, "x") is None  # another DAG's
        assert steering.stop_task_trial(store, "dag_a", "r1", 7, "x") is None  # past the window
        reason = "stopped from Airflow: its task was marked failed"
        experiment_id, record = steering.stop_task_trial(store, "dag_a", "r1", 1, reason)
        assert (experiment_id, record.trial_index) == ("esteer", 1)
        assert steering.stop_requested(store, record.storage_id) == reason
        assert steering.stop_task_trial(store, "dag_a", "r1", 1, "again") is None  # asked once
        outcome = trial_lifecycle.wait_in_worker(started, store, 20, 0.2)  # its follower acts on it
        assert (outcome.status, outcome.message) == (TrialStatus.USER_CANCELED, reason)
    finally:
        started.platform.cancel_sync(started.handle, TrialStatus.USER_CANCELED, "test over")


def test_a_click_on_a_groups_trial_task_reaches_that_groups_trial_only(tmp_path):
    """Issue 39: two experiment task groups in one DAG run each hold trial index 0; a click on
    ``tune_b.trial`` [0] asks tune_b's trial to stop and leaves tune_a's running."""
    (tmp_path / "config.yml").write_text(CONFIG)
    config = load_config(tmp_path / "config.yml")
    store = ExperimentStore(sqlite_url(tmp_path / "s.db"))
    groups = {g: Experiment(config, f"e{g}", tmp_path / "work", group=g) for g in ("a", "b")}
    for experiment in groups.values():
        start_run(experiment, store, "dag_g", "r1", {})
    asked = {g: ask(store, e.experiment_id, 0, f"e{g}-0000", e.algorithm, e.space) for g, e in groups.items()}
    assert steering.stop_task_trial(store, "dag_g", "r1", 0, "x") is None  # no group-less experiment here
    experiment_id, record = steering.stop_task_trial(store, "dag_g", "r1", 0, "clicked", group="b")
    assert (experiment_id, record.storage_id) == ("eb", asked["b"].storage_id)
    assert steering.stop_requested(store, asked["a"].storage_id) is None

"""One trial's life (trialflow.lifecycle.trial_lifecycle) on a real local process, without Airflow: start,
follow in the worker, finish; a retry re-attaches; what the task's outcome is for each ending."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from trialflow.config import load_config
from trialflow.experiment import Experiment
from trialflow.experiment.follow import EXPERIMENT_DEADLINE_REASON
from trialflow.lifecycle import trial_lifecycle
from trialflow.platforms.base import TrialStatus
from trialflow.runs import start_run
from trialflow.tuning.asker import ask

CONFIG = f"""\
searchSpace: {{x: {{_type: uniform, _value: [0, 1]}}}}
trialCommand: {sys.executable} trial.py
trialCodeDirectory: .
trialConcurrency: 2
maxTrialNumber: 2
tuner: {{name: Random}}
trainingService: {{platform: local}}
"""
TRIAL = """\
import os
from trialflow import trial
p = trial.get_next_parameter()
open("launches", "a").write(os.environ["NNI_TRIAL_JOB_ID"] + "\\n")
trial.report_intermediate_result(p["x"] / 2)
trial.report_final_result(p["x"])
"""


@pytest.fixture
def experiment(tmp_path: Path, store) -> Experiment:
    (tmp_path / "config.yml").write_text(CONFIG)
    (tmp_path / "trial.py").write_text(TRIAL)
    experiment = Experiment(load_config(tmp_path / "config.yml"), "elife", tmp_path / "work")
    start_run(experiment, store, "dag_a", "r1", {})
    return experiment


def test_a_trial_runs_and_its_result_is_the_tasks_xcom(experiment, store, tmp_path):
    started = trial_lifecycle.start_trial(experiment, store, "r1", 0)
    again = trial_lifecycle.start_trial(experiment, store, "r1", 0)  # a retried task
    assert again.handle == started.handle and again.record.storage_id == started.record.storage_id
    outcome = trial_lifecycle.wait_in_worker(started, store, 30, 0.1)
    assert outcome.status == TrialStatus.SUCCEEDED
    result = trial_lifecycle.finish_trial(store, started.record.storage_id, outcome.status, outcome.message)
    x = started.record.parameters["x"]
    assert result.succeeded and not result.stopped_on_purpose
    assert result.xcom == {
        "trial_index": 0,
        "trial_id": started.spec.trial_id,
        "parameters": {"x": x},
        "status": "SUCCEEDED",
        "final_metric": x,
        "intermediate_count": 1,
        "message": outcome.message,
        "platform": "local",
        "host": started.handle["host"],
    }
    assert (tmp_path / "launches").read_text().split() == [started.spec.trial_id]  # launched once
    # A second finish (the trigger and the worker both) keeps the first outcome.
    late = trial_lifecycle.finish_trial(store, started.record.storage_id, TrialStatus.FAILED, "late")
    assert late.xcom["final_metric"] == x and store.trial(started.record.storage_id).status == TrialStatus.SUCCEEDED


@pytest.mark.parametrize(
    ("status", "message", "skipped"),
    [
        (TrialStatus.EARLY_STOPPED, "worse than the median", True),
        (TrialStatus.USER_CANCELED, "killed by ann", True),
        (TrialStatus.SYS_CANCELED, EXPERIMENT_DEADLINE_REASON, True),
        (TrialStatus.SYS_CANCELED, "the platform deleted the job", False),
        (TrialStatus.FAILED, "exited with code 1", False),
    ],
)
def test_a_trial_stopped_on_purpose_skips_its_task_and_a_failure_fails_it(experiment, store, status, message, skipped):
    asked = ask(store, "elife", 1, "elife-0001", experiment.algorithm, experiment.space)
    result = trial_lifecycle.finish_trial(store, asked.storage_id, status, message)
    assert result.stopped_on_purpose is skipped and not result.succeeded
    assert result.describe() == f"trial elife-0001 {status.value}: {message}"


def test_past_its_runs_trials_a_task_starts_nothing(experiment, store):
    with pytest.raises(trial_lifecycle.TrialNotStarted, match="this run holds 2 trial"):
        trial_lifecycle.start_trial(experiment, store, "r1", 2)
    assert store.find_trial("elife", 2) is None


def test_a_tuner_class_that_fails_its_ask_fails_the_trial_for_good(tmp_path, store):
    """Issue 64, 7: a custom class that raises every time was retried as if the infrastructure
    had failed (3 tries, each running it again); TrialCannotRun fails the task without retry."""
    from tests.tuning.custom.test_runner import CLASSES

    (tmp_path / "config.yml").write_text(
        CONFIG.replace("tuner: {name: Random}", f"tuner: {{className: lossy_tuners.Raising, codeDirectory: {CLASSES}}}")
    )
    (tmp_path / "trial.py").write_text(TRIAL)
    experiment = Experiment(load_config(tmp_path / "config.yml"), "eraising", tmp_path / "work")
    start_run(experiment, store, "dag_a", "r1", {})
    with pytest.raises(trial_lifecycle.TrialCannotRun, match="Raising.generate_parameters failed: ValueError"):
        trial_lifecycle.start_trial(experiment, store, "r1", 0)
    assert not (tmp_path / "launches").exists()


class _Recorded:
    """A tracker behind the start's seam (trial_lifecycle.StartTracking), recording what it is told."""

    reads = ("experiment_name", "no_such_attr")

    def __init__(self) -> None:
        self.told: list[tuple[int, dict]] = []

    def trial_env(self, storage_id, attrs):
        self.told.append((storage_id, dict(attrs)))
        return {"TRACKED_AS": f"run-{storage_id}"}


def test_a_start_tells_its_tracker_once_with_the_attributes_it_read_with_its_own(experiment, store, tmp_path):
    store.set_experiment_attrs(experiment.experiment_id, {"experiment_name": "digits"})
    tracker = _Recorded()
    started = trial_lifecycle.start_trial(experiment, store, "r1", 0, tracking=tracker)
    storage_id = started.record.storage_id
    assert len(tracker.told) == 1 and tracker.told[0][0] == storage_id
    told = tracker.told[0][1]
    assert told["experiment_name"] == "digits" and "no_such_attr" not in told  # read with the start's own
    assert started.spec.env["TRACKED_AS"] == f"run-{storage_id}"  # what the trial is launched with
    again = trial_lifecycle.start_trial(experiment, store, "r1", 0, tracking=tracker)  # a retry re-attaches
    assert again.handle == started.handle and len(tracker.told) == 1  # its run was made at its start
    trial_lifecycle.wait_in_worker(started, store, 30, 0.1)


def test_a_hybrid_trial_records_its_platform_with_its_other_facts_and_a_retry_keeps_it(tmp_path, store):
    (tmp_path / "config.yml").write_text(CONFIG)
    (tmp_path / "trial.py").write_text(TRIAL)
    config = load_config(tmp_path / "config.yml").model_copy(deep=True)
    config.training_service = config.training_service * 2  # NNI's hybrid mode: two platforms listed
    experiment = Experiment(config, "ehybridstart", tmp_path / "work")
    start_run(experiment, store, "dag_a", "r1", {})
    first, second = (trial_lifecycle.start_trial(experiment, store, "r1", i) for i in range(2))
    assert (first.service_index, second.service_index) == (0, 1)  # the second goes where fewer run
    assert [store.trial(s.record.storage_id).service_index for s in (first, second)] == [0, 1]  # recorded
    again = trial_lifecycle.start_trial(experiment, store, "r1", 1)  # a retry: the platform it had
    assert again.service_index == 1 and again.handle == second.handle
    for started in (first, second):
        trial_lifecycle.wait_in_worker(started, store, 30, 0.1)


def test_a_trial_that_can_never_launch_fails_in_one_write_and_keeps_why(tmp_path, store, monkeypatch):
    """More GPUs than the machine has: the trial was given its parameters, then can never be launched. It is
    closed FAILED with why (one write, nothing read first) and its task fails without retry."""
    import json
    import os

    fakes = Path(__file__).resolve().parents[1] / "helpers" / "fakes"
    (tmp_path / "gpus.json").write_text(json.dumps({"gpus": ["GPU-0", "GPU-1"], "apps": []}))
    monkeypatch.setenv("FAKE_GPUS", str(tmp_path / "gpus.json"))  # this machine has two GPUs
    monkeypatch.setenv("PATH", f"{fakes}:{os.environ['PATH']}")
    gpus = CONFIG.replace("trialCodeDirectory: .\n", "trialCodeDirectory: .\ntrialGpuNumber: 3\n")
    (tmp_path / "config.yml").write_text(gpus.replace("{platform: local}", "{platform: local, useActiveGpu: false}"))
    (tmp_path / "trial.py").write_text(TRIAL)
    experiment = Experiment(load_config(tmp_path / "config.yml"), "egpus", tmp_path / "work")
    start_run(experiment, store, "dag_a", "r1", {})
    with pytest.raises(trial_lifecycle.TrialCannotRun, match="trialGpuNumber 3 can never fit") as raised:
        trial_lifecycle.start_trial(experiment, store, "r1", 0)
    (record,) = store.trial_rows(experiment.experiment_id)
    assert record.status == "FAILED" and record.message is not None and record.message in str(raised.value)
    assert list(tmp_path.glob("**/launches")) == []  # nothing ran

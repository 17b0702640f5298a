"""Fixtures of the trigger and sensor tests: real local trials of a real experiment and store,
submitted as the trial task submits them, each followed by a TrialTrigger run directly (no
triggerer). A pytest plugin (tests/conftest.py), so every test folder reaches them."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from trialflow.experiment import Experiment, load_runnable_config
from trialflow.lifecycle.submission import Submission
from trialflow.store.experiment_store import ExperimentStore, sqlite_url
from trialflow.triggers.trial import TrialTrigger
from trialflow.tuning.asker import ask

TRIAL = """\
import os, sys, time, subprocess
from trialflow import trial
p = trial.get_next_parameter()
mode = os.environ.get("MODE", "ok")
if mode == "fail":
    trial.report_intermediate_result(0.5)
    sys.exit(3)
if mode == "hang":
    child = subprocess.Popen(["sleep", "300"], start_new_session=True)
    open(os.environ["NNI_OUTPUT_DIR"] + "/child.pid", "w").write(str(child.pid))
    time.sleep(300)
if mode.startswith("curve="):  # a flat learning curve at this level, one result per 50 ms
    level = float(mode.split("=")[1])
    for i in range(int(os.environ.get("STEPS", "200"))):
        trial.report_intermediate_result(level)
        time.sleep(0.05)
    trial.report_final_result(level)
    sys.exit(0)
for i in range(4):
    trial.report_intermediate_result(i / 4)
trial.report_final_result(p["x"])
"""


@pytest.fixture
def algorithms() -> str:
    return "tuner: {name: Random}"


@pytest.fixture
def local_trials(tmp_path: Path, monkeypatch, algorithms: str):
    (tmp_path / "t.py").write_text(TRIAL)
    config = tmp_path / "config.yml"
    config.write_text(f"""\
searchSpace: {{x: {{_type: uniform, _value: [0, 1]}}}}
trialCommand: {sys.executable} t.py
trialConcurrency: 1
maxTrialDuration: 2s
trainingService: {{platform: local}}
{algorithms}
""")
    url = sqlite_url(tmp_path / "store.db")
    monkeypatch.setenv(
        "AIRFLOW_CONN_TRIALFLOW_TEST", json.dumps({"conn_type": "trialflow", "extra": {"storage_url": url}})
    )
    experiment = Experiment(load_runnable_config(config), "etest000", tmp_path / "work")
    store = ExperimentStore(url)
    experiment.open(store)
    study = experiment.experiment_id

    def submit(
        index: int, mode: str, deadline: float | None = None, steps: int = 200, experiment_deadline: float | None = None
    ) -> TrialTrigger:
        asked = ask(store, study, index, f"etest000-{index:04d}", experiment.algorithm, experiment.space)
        spec = experiment.trial_spec(index, asked.number, asked.parameters)
        spec.env["MODE"] = mode
        spec.env["STEPS"] = str(steps)
        platform = experiment.platform()
        platform.prepare_sync(experiment.experiment_id)
        handle = platform.submit_sync(spec)
        submission = Submission(
            config_path=str(config),
            store_conn_id="trialflow_test",
            experiment_id=experiment.experiment_id,
            workdir=str(experiment.workdir),
            handle=handle,
            storage_id=asked.storage_id,
            deadline=deadline,
            experiment_deadline=experiment_deadline,
        )
        return TrialTrigger(submission=submission.to_dict(), poll_interval=0.05)

    return submit, store

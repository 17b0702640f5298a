"""TrialTrigger run directly (no scheduler) against real local trials and a real store."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path

import pytest

from trialflow.experiment import Experiment, load_runnable_config
from trialflow.platforms.local import process_alive
from trialflow.triggers.trial import TrialTrigger
from trialflow.tuning.store import ExperimentStore, sqlite_url

TRIAL = """\
import os, sys, time, subprocess
from trialflow import trial
p = trial.get_next_parameter()
mode = os.environ.get("MODE", "ok")
if mode == "hang":
    child = subprocess.Popen(["sleep", "300"], start_new_session=True)
    open(os.environ["NNI_OUTPUT_DIR"] + "/child.pid", "w").write(str(child.pid))
    time.sleep(300)
for i in range(4):
    trial.report_intermediate_result(i / 4)
trial.report_final_result(p["x"])
"""


@pytest.fixture
def setup(tmp_path: Path, monkeypatch):
    (tmp_path / "t.py").write_text(TRIAL)
    config = tmp_path / "config.yml"
    config.write_text(f"""\
searchSpace: {{x: {{_type: uniform, _value: [0, 1]}}}}
trialCommand: {sys.executable} t.py
trialConcurrency: 1
maxTrialDuration: 2s
tuner: {{name: Random}}
trainingService: {{platform: local}}
""")
    url = sqlite_url(tmp_path / "store.db")
    monkeypatch.setenv("AIRFLOW_CONN_TRIALFLOW_TEST", json.dumps({"conn_type": "trialflow", "extra": {"storage_url": url}}))
    experiment = Experiment(load_runnable_config(config), "etest000", tmp_path / "work")
    store = ExperimentStore(url)
    study = store.open_study(experiment.experiment_id, experiment.config.tuner, experiment.space)

    def submit(index: int, mode: str, deadline: float | None = None) -> TrialTrigger:
        asked = store.ask(study, index, f"etest000-{index:04d}", experiment.config.tuner, experiment.space)
        spec = experiment.trial_spec(index, asked.number, asked.parameters)
        spec.env["MODE"] = mode
        platform = experiment.platform()
        platform.prepare(experiment.experiment_id)
        handle = platform.submit(spec)
        return TrialTrigger(config_path=str(config), experiment_id=experiment.experiment_id,
                            workdir=str(experiment.workdir), handle=handle, storage_id=asked.storage_id,
                            store_conn_id="trialflow_test", deadline=deadline, poll_interval=0.05)
    return submit, store


async def first_event(trigger: TrialTrigger) -> dict:
    async for event in trigger.run():
        return event.payload
    raise AssertionError("no event")


def test_serialize_round_trip(setup):
    submit, _ = setup
    trigger = submit(0, "ok")
    path, kwargs = trigger.serialize()
    assert path == "trialflow.triggers.trial.TrialTrigger"
    again = TrialTrigger(**json.loads(json.dumps(kwargs)))
    assert again.serialize() == (path, kwargs)


def test_trigger_follows_to_the_end_and_records_metrics(setup):
    submit, store = setup
    trigger = submit(1, "ok")
    event = asyncio.run(first_event(trigger))
    assert event["status"] == "SUCCEEDED"
    frozen = store.storage.get_trial(trigger.storage_id)
    assert frozen.intermediate_values == {0: 0.0, 1: 0.25, 2: 0.5, 3: 0.75}
    assert frozen.user_attrs["final_metric"] == frozen.user_attrs["parameters"]["x"]
    assert event["cursor"]["metrics_offset"] > 0


def test_a_restarted_trigger_resumes_from_its_cursor(setup):
    submit, store = setup
    trigger = submit(2, "ok")
    asyncio.run(first_event(trigger))
    path, kwargs = trigger.serialize()
    resumed = TrialTrigger(**kwargs)  # as a new triggerer would build it, with the saved cursor
    event = asyncio.run(first_event(resumed))
    assert event["status"] == "SUCCEEDED"
    assert len(store.storage.get_trial(trigger.storage_id).intermediate_values) == 4


def test_deadline_stops_the_trial_and_its_children(setup):
    submit, _ = setup
    trigger = submit(3, "hang", deadline=time.time() + 1.0)
    started = time.monotonic()
    event = asyncio.run(first_event(trigger))
    assert event["status"] == "EARLY_STOPPED" and event["message"] == "maxTrialDuration exceeded"
    assert time.monotonic() - started < 30
    child = int((Path(trigger.handle["trial_dir"]) / "child.pid").read_text())
    assert not process_alive(child) and not process_alive(trigger.handle["pid"])


def test_a_broken_handle_is_an_error_event_not_a_hang(setup):
    submit, _ = setup
    trigger = submit(4, "ok")
    trigger.config_path = "/nonexistent/config.yml"
    event = asyncio.run(first_event(trigger))
    assert event["status"] == "ERROR" and "file not found" in event["message"]

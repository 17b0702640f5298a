"""`trialflow update-searchspace` on a running experiment under the real scheduler: the space
narrowed while trial 5 of 7 waits, every later trial's parameters fall inside it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers.airflow import PY, Harness
from tests.helpers.airflow_controls import wait_for
from trialflow.platforms.base import experiment_id_for

pytestmark = pytest.mark.integration

#: The trial script: the trial of sequence id HOLD_AT waits for the change (the page's test
#: holds an earlier one: each trial under the session's loaded Airflow costs seconds in CI).
HOLDING = """\
import os, sys, time
from trialflow import trial
p = trial.get_next_parameter()
if trial.get_sequence_id() == int(os.environ.get("HOLD_AT", "4")):  # trial 5 waits for the change
    open(sys.argv[1], "w").write("holding")
    for _ in range(1200):
        if os.path.exists(sys.argv[2]):
            break
        time.sleep(0.1)
trial.report_final_result(-abs(p["x"] - 2.5) - (0 if p["opt"] == "adam" else 1))
"""
NARROW = {"x": {"_type": "uniform", "_value": [2, 3]}, "opt": {"_type": "choice", "_value": ["sgd", "adam"]}}


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trialflow.cli", *args], capture_output=True, text=True, timeout=120, check=False
    )


def test_a_space_narrowed_from_the_command_line_holds_every_later_trial(harness: Harness):
    folder = harness.root / "experiments" / "space_change"
    folder.mkdir(parents=True, exist_ok=True)
    config = (
        "searchSpace:\n  x: {_type: uniform, _value: [0, 10]}\n  opt: {_type: choice, _value: [sgd, adam, rmsprop]}\n"
        f"trialCommand: {PY} t.py {folder / 'holding'} {folder / 'release'}\n"
        "trialConcurrency: 1\nmaxTrialNumber: 7\n"
        "tuner: {name: TPE, classArgs: {optimize_mode: maximize, seed: 4, tpe_args: {n_startup_jobs: 3}}}\n"
        "trainingService: {platform: local}\n"
    )
    dag_id, run_id = harness.start("space_change", config, {"t.py": HOLDING})
    experiment_id = experiment_id_for(dag_id, run_id)
    wait_for("trial 5 holding", lambda: (folder / "holding").exists(), 180)
    (folder / "narrow.json").write_text(json.dumps(NARROW))
    bad = folder / "bad.json"
    bad.write_text('{"x": {"_type": "uniform", "_value": [3]}}')
    refused = _cli("update-searchspace", experiment_id, str(bad), "--store", harness.store_url)
    assert refused.returncode == 1 and "searchSpace.x._value:" in refused.stderr and "Traceback" not in refused.stderr
    changed = _cli("update-searchspace", experiment_id, str(folder / "narrow.json"), "--store", harness.store_url)
    assert changed.returncode == 0, changed.stderr
    assert "search space version 1 (2 parameter(s))" in changed.stdout
    (folder / "release").touch()
    _, state = harness.wait(dag_id, run_id, 300)
    assert state == "success"
    rows = harness.rows(dag_id, run_id)
    assert [r.status for r in rows] == ["SUCCEEDED"] * 7
    later = [r.parameters for r in rows[5:]]
    assert all(2 <= p["x"] <= 3 and p["opt"] in ("sgd", "adam") for p in later), later
    listed = _cli("update-searchspace", experiment_id, "--store", harness.store_url)
    assert listed.returncode == 0 and "version 0 (the config's)" in listed.stdout and "version 1 (" in listed.stdout
    history = harness.store.experiment_attr(experiment_id, "actions")
    assert [(h["action"], h["detail"]) for h in history] == [("change search space", "version 1: x, opt")]

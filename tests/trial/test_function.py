"""Function trials (trialflow.trial.function) run as real local trials: the function gets the
trial's parameters, its return value is the final result, its intermediate results reach the
store, and a failure says why. The command is an ordinary trial command on the local platform."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from trialflow.config.model import AlgorithmConfig
from trialflow.config.platforms import LocalConfig
from trialflow.config.search_space import parse_search_space
from trialflow.experiment.follow import Follower
from trialflow.platforms.base import TrialSpec, TrialStatus
from trialflow.platforms.local import LocalPlatform
from trialflow.trial.function import function_command
from trialflow.trial.inputs import check_inputs, inputs_env
from trialflow.tuning.asker import ask

MODEL = """\
from trialflow import trial

def train(params):
    for step in range(3):
        trial.report_intermediate_result(params["x"] * step)
    return {"default": params["x"] * 2, "steps": 3}

def scalar(params):
    return params["x"]

def broken(params):
    raise KeyError("no column named price")

def silent(params):
    pass

def reports_itself(params):
    trial.report_final_result(0.25)

def reports_and_returns(params):
    trial.report_final_result(0.5)
    return 0.75  # the reported one counts, and no second final is sent

def with_data(params, data, scale=1):
    return len(open(data).read()) * scale

def with_anything(params, **inputs):
    return float(inputs["scale"])

class Holder:
    @staticmethod
    def nested(params):
        return 1.5

not_callable = 3
"""


def run_function(
    tmp_path: Path, store, import_path: str, index: int, inputs: dict | None = None
) -> tuple[TrialStatus, str | None, object]:
    """One trial of ``import_path`` from a code folder holding models/train.py, followed to its end."""
    code = tmp_path / "code"
    (code / "models").mkdir(parents=True, exist_ok=True)
    (code / "models" / "__init__.py").write_text("")
    (code / "models" / "train.py").write_text(MODEL)
    if not store.experiment_exists("efunc"):
        store.open_experiment("efunc")
    space = parse_search_space({"x": {"_type": "uniform", "_value": [0, 1]}})
    asked = ask(store, "efunc", index, f"efunc-{index:04d}", AlgorithmConfig(name="Random"), space)
    platform = LocalPlatform(LocalConfig(), tmp_path / "work")
    command = function_command(import_path, sys.executable)
    env = inputs_env(check_inputs(inputs))
    spec = TrialSpec("efunc", f"efunc-{index:04d}", index, index, asked.parameters, command, code, env=env)
    handle = platform.submit_sync(spec)
    outcome = asyncio.run(Follower(platform, store, handle, asked.storage_id).run(0.1, 60))
    record = store.close(asked.storage_id, outcome.status, outcome.message)
    return outcome.status, outcome.message, (record, asked.parameters)


def test_a_function_gets_its_parameters_and_its_return_value_is_the_final_result(tmp_path, store):
    status, _, (record, parameters) = run_function(tmp_path, store, "models.train:train", 0)
    assert status == TrialStatus.SUCCEEDED
    assert record.final == {"default": parameters["x"] * 2, "steps": 3}
    assert record.intermediate_count == 3  # through the trial SDK, as any trial reports


@pytest.mark.parametrize(
    ("path", "final"),
    [
        ("models.train:scalar", "x"),
        ("models.train:reports_itself", 0.25),
        ("models.train:reports_and_returns", 0.5),
        ("models.train:Holder.nested", 1.5),
    ],
)
def test_a_number_a_result_reported_by_the_function_itself_and_a_nested_attribute(tmp_path, store, path, final):
    status, _, (record, parameters) = run_function(tmp_path, store, path, 1)
    assert status == TrialStatus.SUCCEEDED
    assert record.final == (parameters["x"] if final == "x" else final)
    assert "second final result" not in (record.message or "")  # one final only, never two


@pytest.mark.parametrize(
    ("path", "said"),
    [
        ("models.train:broken", "KeyError: 'no column named price'"),
        ("models.train:silent", "models.train:silent returned None"),
        ("models.train:not_callable", "is a int, not a function"),
        ("models.missing:train", "ModuleNotFoundError: No module named 'models.missing'"),
    ],
)
def test_a_function_that_fails_fails_its_trial_saying_why(tmp_path, store, path, said):
    status, message, _ = run_function(tmp_path, store, path, 2)
    assert status == TrialStatus.FAILED
    assert said in (message or ""), message


def test_outside_an_experiment_it_runs_standalone_as_the_sdk_does(tmp_path):
    (tmp_path / "m.py").write_text("def f(p):\n    return len(p)\n")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run(
        [sys.executable, "-m", "trialflow.trial.function", "m:f"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0 and "final result: 0" in done.stdout, done.stderr
    usage = subprocess.run([sys.executable, "-m", "trialflow.trial.function"], env=env, capture_output=True, text=True)
    assert usage.returncode == 2 and "usage:" in usage.stderr


@pytest.mark.parametrize(
    ("path", "final"),
    [
        ("models.train:with_data", 5 * 2),  # the inputs its signature names (data, scale)
        ("models.train:with_anything", 2.0),  # **inputs: all of them
        ("models.train:scalar", "x"),  # a function of the parameters alone takes none
    ],
)
def test_a_function_takes_the_runs_inputs_its_signature_names(tmp_path, store, path, final):
    (tmp_path / "data.txt").write_text("rows\n")
    inputs = {"data": str(tmp_path / "data.txt"), "scale": 2}
    status, message, (record, parameters) = run_function(tmp_path, store, path, 3, inputs)
    assert status == TrialStatus.SUCCEEDED, message
    assert record.final == (parameters["x"] if final == "x" else final)

"""A run's inputs come from upstream tasks' XComs (anything an upstream task returned): each is
bounded, named as an environment variable may be, and refused by name otherwise, before the
run's window is written (trialflow.trial.inputs)."""

from __future__ import annotations

import json
import time

import pytest

from tests.helpers.sealing import FernetSealer, sealed_with
from trialflow.experiment.run_windows import RunWindows
from trialflow.trial.inputs import (
    MAX_INPUTS,
    MAX_VALUE_CHARS,
    InputsError,
    check_inputs,
    inputs_env,
    read_inputs,
)
from trialflow.trial.sealing import SealingUnavailable


def test_inputs_reach_the_environment_as_text_and_as_json():
    inputs = check_inputs({"data": "/d/x.npz", "epochs": 3, "rate": 0.5, "fast": True})
    env = inputs_env(inputs)
    assert env["TRIALFLOW_INPUT_DATA"] == "/d/x.npz" and env["TRIALFLOW_INPUT_EPOCHS"] == "3"
    assert env["TRIALFLOW_INPUT_FAST"] == "true"
    assert read_inputs(env) == inputs
    assert inputs_env({}) == {} and read_inputs({}) == {}


@pytest.mark.parametrize(
    "raw, words",
    [
        ({"a b": 1}, "'a b' is not a name"),
        ({"1x": 1}, "'1x' is not a name"),
        ({"PATH=/tmp;x": 1}, "is not a name"),
        ({"é": 1}, "is not a name"),
        ({"x" * 65: 1}, "is not a name"),
        ({"data": {"nested": 1}}, "inputs.data: expected text, a number or a boolean"),
        ({"data": None}, "inputs.data: expected text"),
        ({"data": ["a"]}, "inputs.data: expected text"),
        ({"data": float("nan")}, "inputs.data: expected a finite number"),
        ({"data": float("inf")}, "inputs.data: expected a finite number"),
        ({"data": 10**400}, "inputs.data: expected a whole number within 64 bits"),
        ({"data": "x" * (MAX_VALUE_CHARS + 1)}, f"at most {MAX_VALUE_CHARS} characters"),
        ({f"k{i}": "x" * 4000 for i in range(20)}, "characters in all"),
        ({f"k{i}": 1 for i in range(MAX_INPUTS + 1)}, f"at most {MAX_INPUTS}"),
        (["data"], "expected a mapping"),
        ({"data": "a\x00b"}, "inputs.data: holds a NUL byte at character 1"),
    ],
)
def test_what_cannot_go_to_a_trial_is_named(raw, words):
    with pytest.raises(InputsError, match=words.replace("(", r"\(")):
        check_inputs(raw)


def test_a_huge_number_is_refused_without_printing_it_and_in_linear_time():
    started = time.perf_counter()
    with pytest.raises(InputsError) as refused:
        check_inputs({"n": 10**100_000})
    assert time.perf_counter() - started < 0.5 and len(str(refused.value)) < 200


@pytest.mark.parametrize("text", ["not json", json.dumps(["a"]), json.dumps({"a b": 1}), "1" * 5000, "{" * 200_000])
def test_a_forged_environment_is_refused_by_name(text):
    with pytest.raises(InputsError, match="TRIALFLOW_INPUTS|inputs"):
        read_inputs({"TRIALFLOW_INPUTS": text})


def test_a_run_with_a_bad_input_writes_nothing(tmp_path, store):
    from trialflow.config import load_config
    from trialflow.experiment import Experiment
    from trialflow.runs import start_run

    (tmp_path / "c.yml").write_text(
        "searchSpace: {x: {_type: uniform, _value: [0, 1]}}\ntrialCommand: python3 t.py\ntrialConcurrency: 1\n"
        "maxTrialNumber: 1\ntuner: {name: Random}\ntrainingService: {platform: local}\n"
    )
    experiment = Experiment(load_config(tmp_path / "c.yml"), "einputs", tmp_path / "work")
    with pytest.raises(InputsError, match="inputs.data"):
        start_run(experiment, store, "dag_a", "r1", {}, inputs={"data": {"x": 1}})
    assert not store.experiment_exists("einputs")
    started = start_run(experiment, store, "dag_a", "r1", {}, inputs={"data": "/d"})
    assert started.window.inputs == {"data": "/d"}
    assert experiment.window(store, "r1").inputs == {"data": "/d"}


def test_secret_inputs_are_kept_for_the_trial_and_masked_for_every_reader(tmp_path, store):
    """Issue 46, 4: the store keeps what the trial must get; a summary (pages, REST) shows the
    inputs Airflow's masker knew as ``***`` and masks the secrets inside the others."""
    from trialflow import queries
    from trialflow.config import load_config
    from trialflow.experiment import Experiment
    from trialflow.runs import start_run

    (tmp_path / "c.yml").write_text(
        "searchSpace: {x: {_type: uniform, _value: [0, 1]}}\ntrialCommand: python3 t.py\ntrialConcurrency: 1\n"
        "maxTrialNumber: 1\ntuner: {name: Random}\ntrainingService: {platform: local}\n"
    )
    experiment = Experiment(load_config(tmp_path / "c.yml"), "esecret", tmp_path / "work")
    inputs = {"pw": "hunter2-pw", "url": "postgresql://u:inline-pw@h/db", "data": "/d", "n": 3}
    with sealed_with(FernetSealer()):
        started = start_run(experiment, store, "dag_a", "r1", {}, inputs=inputs, secret_inputs=["pw", "gone"])
        assert started.window.secret_inputs == ("pw",)  # a name that is no input is not kept
        window = experiment.window(store, "r1")
        assert window.inputs == inputs and window.secret_values() == ["hunter2-pw"]
        submission = experiment.trial_spec(0, 0, {"x": 0.5}, inputs=window.inputs)
        assert submission.env["TRIALFLOW_INPUT_PW"] == "hunter2-pw"  # the trial gets the real value
        assert queries.secret_input_values(store.engine, "esecret") == ["hunter2-pw"]
    summary = queries.experiment_summary(store.engine, "esecret")
    assert summary["runs"][0]["inputs"] == {"pw": "***", "url": "postgresql://u:***@h/db", "data": "/d", "n": 3}
    assert "hunter2" not in json.dumps(summary) and "inline-pw" not in json.dumps(summary)
    # issue 64, 3: at rest the secret is sealed (Airflow's Fernet key), in every row of the store
    with store.engine.connect() as conn:
        tables = [r[0] for r in conn.exec_driver_sql("SELECT name FROM sqlite_master WHERE type = 'table'")]
        rows = [str(row) for t in tables for row in conn.exec_driver_sql(f'SELECT * FROM "{t}"')]
    assert rows and not any("hunter2" in row for row in rows)
    # a process without the key: nothing to mask with, and the trial refused rather than handed "***"
    with sealed_with(None):
        window = experiment.window(store, "r1")
        assert window.secret_values() == [] and window.inputs["data"] == "/d"
        with pytest.raises(SealingUnavailable, match="secret input 'pw' is kept sealed"):
            experiment.trial_spec(0, 0, {"x": 0.5}, inputs=window.inputs)
        with pytest.raises(SealingUnavailable, match="no key to seal it with"):
            start_run(experiment, store, "dag_a", "r2", {}, inputs=inputs, secret_inputs=["pw"])
        assert "r2" not in RunWindows(store, "esecret").all()  # refused before anything was written
    with sealed_with(FernetSealer()):  # another key than the one that sealed it: not opened either
        assert experiment.window(store, "r1").secret_values() == []


def test_the_start_step_asks_airflows_masker_which_inputs_are_secrets():
    from airflow.sdk.log import mask_secret

    from trialflow.from_airflow.secrets import masked_names, masked_text

    value = f"registered-{time.time_ns()}"
    mask_secret(value)  # what rendering {{ conn.x.password }} does in a task
    assert masked_names({"pw": value, "data": "/d", "password": "plain", "n": 3}) == ["password", "pw"]
    assert masked_text(f"said {value}") == "said ***"
    assert masked_names(None) == [] and masked_names({}) == []


@pytest.mark.parametrize(
    "text, words",
    [
        ("{", "is not JSON (Expecting property name enclosed in double quotes"),
        ("[" * 100_000, "is not JSON"),
        ('{"parameter_id": 0}', 'has no "parameters" key'),
        ("[1, 2]", 'has no "parameters" key'),
        ('"parameters"', 'has no "parameters" key'),
    ],
    ids=["truncated", "deep", "no-parameters", "a-list", "a-string"],
)
def test_a_parameter_file_that_is_not_nnis_is_named_by_the_sdk_not_a_traceback(tmp_path, text, words):
    """A trial's SDK reading a broken or foreign parameter.cfg says which file and what was
    expected, in one line of the trial's stderr (trialflow.trial.get_next_parameter)."""
    import subprocess
    import sys

    (tmp_path / "parameter.cfg").write_text(text)
    env = {"PATH": "/usr/bin:/bin", "NNI_SYS_DIR": str(tmp_path), "NNI_PLATFORM": "local"}
    code = "from trialflow import trial; trial.get_next_parameter()"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"RuntimeError: {tmp_path / 'parameter.cfg'} ") and words in last
    assert "NNI's parameter file is expected" in last and "Traceback" in result.stderr

"""Config values that make no sense are refused at validate (and so at DAG parse), clearly,
without echoing secrets; sizes that would exhaust memory at parse are bounded."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from trialflow.cli.render import render_trial
from trialflow.config import ConfigError, load_config
from trialflow.experiment import load_runnable_config, trial_count

BASE = """\
searchSpace: {x: {_type: uniform, _value: [0, 1]}}
trialCommand: python3 t.py
trialConcurrency: 2
maxTrialNumber: 3
tuner: {name: TPE}
trainingService: {platform: local}
"""


def _error(write, text: str, name: str = "c.yml") -> ConfigError:
    with pytest.raises(ConfigError) as err:
        load_runnable_config(write(name, text))
    return err.value


@pytest.mark.parametrize(
    "line, key, expected",
    [
        ("maxTrialDuration: .nan", "maxTrialDuration", "positive, finite duration"),
        ("maxTrialDuration: .inf", "maxTrialDuration", "positive, finite duration"),
        ("maxExperimentDuration: -.inf", "maxExperimentDuration", "positive, finite duration"),
        ("maxTrialDuration: true", "maxTrialDuration", "got a boolean"),
    ],
)
def test_durations_must_be_finite(write, line, key, expected):
    err = _error(write, BASE + line + "\n")
    assert [p.key_path for p in err.problems] == [(key,)] and expected in str(err)
    assert err.problems[0].line == 7


@pytest.mark.parametrize(
    "text, key",
    [
        (BASE.replace("trialConcurrency: 2", "trialConcurrency: true"), ("trialConcurrency",)),
        (BASE.replace("maxTrialNumber: 3", "maxTrialNumber: false"), ("maxTrialNumber",)),
        (BASE + "trialGpuNumber: true\n", ("trialGpuNumber",)),
        (
            BASE.replace("{platform: local}", "{platform: remote, machineList: [{host: h, user: u, port: true}]}"),
            ("trainingService", "machineList", 0, "port"),
        ),
    ],
)
def test_booleans_are_not_numbers(write, text, key):
    err = _error(write, text)
    assert err.problems[0].key_path == key and "expected a number, got" in str(err)


def test_memory_sizes_must_be_finite(write):
    text = BASE.replace(
        "{platform: local}",
        """
  platform: kubeflow
  operator: tf-operator
  worker: {replicas: 1, command: python3 t.py, cpuNumber: .nan, memorySize: .inf}""",
    )
    message = str(_error(write, text))
    assert (
        "cpuNumber: expected a finite number" in message and "memorySize: expected a positive, finite size" in message
    )


@pytest.mark.parametrize("seed", [-1, 2**32, 10**26, 1.5, "7", True])
def test_tuner_seeds_outside_the_generators_range_are_refused(write, seed):
    text = BASE.replace("{name: TPE}", f"{{name: TPE, classArgs: {{seed: {seed!r}}}}}".replace("'", '"'))
    err = _error(write, text)
    assert err.problems[0].key_path == ("tuner", "classArgs", "seed")
    assert "integer seed from 0 to 4294967295" in str(err)


def test_the_largest_seed_renders_every_trial(write):
    path = write("c.yml", BASE.replace("{name: TPE}", "{name: Anneal, classArgs: {seed: 4294967295}}"))
    for index in range(3):
        assert 0 <= render_trial(path, index)["parameters"]["x"] <= 1


@pytest.mark.parametrize(
    "written, kind",
    [
        ("012345", "rewrote"),  # octal: 5349
        ("0x1F2E", "rewrote"),
        ("1_234", "rewrote"),
        ("1:30:00", "rewrote"),  # sexagesimal: 5400
        ("2024-01-31", "a date"),
        ("2024-01-31 10:00:00", "a datetime"),
        ("3.14159", "a float"),
        ("true", "a bool"),
        ("[s3cr3t]", "a list"),
        ("{pw: s3cr3t}", "a dict"),
    ],
)
def test_secrets_that_are_not_text_are_refused_and_never_echoed(write, written, kind):
    text = BASE.replace(
        "{platform: local}", f"{{platform: remote, machineList: [{{host: h, user: u, password: {written}}}]}}"
    )
    err = _error(write, text)
    message = str(err)
    assert err.problems[0].key_path == ("trainingService", "machineList", 0, "password")
    assert kind in message and "value not shown" in message
    for leaked in (written, "5349", "7982", "1234", "5400", "s3cr3t", "2024", "3.14"):
        assert leaked not in message.replace(str(err.problems[0].file), ""), leaked


def test_plain_digit_secrets_are_taken_as_written(write):
    config = load_config(
        write(
            "c.yml",
            BASE.replace("{platform: local}", "{platform: remote, machineList: [{host: h, user: u, password: 12345}]}"),
        )
    )
    assert config.training_service[0].machine_list[0].password.get_secret_value() == "12345"


def test_a_huge_max_trial_number_is_a_clear_error(write):
    err = _error(write, BASE.replace("maxTrialNumber: 3", "maxTrialNumber: 100000000"))
    assert err.problems[0].key_path == ("maxTrialNumber",) and "at most 10000 trials per DAG run" in str(err)
    assert "scheduledRuns: continue" in str(err)


GRID = (
    """\
searchSpace:
"""
    + "".join(f"  p{i}: {{_type: randint, _value: [0, 1000]}}\n" for i in range(6))
    + """\
trialCommand: python3 t.py
trialConcurrency: 1
tuner: {name: GridSearch}
trainingService: {platform: local}
"""
)


def test_a_huge_grid_is_counted_and_indexed_without_listing_it(write):
    path = write("grid.yml", GRID + "maxTrialNumber: 2\n")
    config = load_runnable_config(path)
    assert trial_count(config) == 2
    assert render_trial(path, 1)["parameters"] == {"p0": 1, "p1": 0, "p2": 0, "p3": 0, "p4": 0, "p5": 0}
    grid = __import__("trialflow.config.search_space", fromlist=["x"]).parse_search_space(config.search_space).grid()
    assert grid.size == 1000**6 and grid[1000**6 - 1] == {f"p{i}": 999 for i in range(6)}


def test_a_huge_grid_without_max_trial_number_says_what_to_do(write):
    err = _error(write, GRID)
    assert err.problems[0].key_path == ("maxTrialNumber",)
    assert "has 1000000000000000000 points" in str(err) and "set maxTrialNumber" in str(err)


def test_a_huge_grid_dag_parses_in_a_bounded_process(write, tmp_path: Path):
    """The DAG file of a 10**18-point grid builds its 2 trials within 1 GiB of address space."""
    import resource

    config = write("grid.yml", GRID + "maxTrialNumber: 2\n")
    script = write(
        "dag.py",
        f"from trialflow.dag import experiment_dag\ndag = experiment_dag({str(config)!r})\nprint(len(dag.task_dict))\n",
    )

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))

    result = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, preexec_fn=limit
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "6"  # start, the mapped trials, their watch, end, continue, publish_best

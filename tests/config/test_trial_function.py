"""trialFunction: a Python function as the trial, as a config key (trialflow.trial.function runs it)."""

from __future__ import annotations

import shlex

import pytest

from trialflow.config import ConfigError, effective_trial_command, load_config, to_v2_dict

FUNCTION = """\
searchSpace:
  x: {_type: uniform, _value: [0, 1]}
trialFunction: models.train:objective
trialConcurrency: 2
tuner: {name: TPE, classArgs: {optimize_mode: maximize}}
trainingService: {platform: local}
"""

KUBEFLOW = """\
searchSpace:
  x: {_type: uniform, _value: [0, 1]}
trialFunction: models.train:objective
trialConcurrency: 1
tuner: {name: Random}
trainingService:
  platform: kubeflow
  operator: pytorch-operator
  master: {replicas: 1, cpuNumber: 1, memorySize: 1g, dockerImage: python:3.11}
  worker: {replicas: 1, cpuNumber: 1, memorySize: 1g, dockerImage: python:3.11, command: python3 worker.py}
"""


def test_a_function_is_the_trial_command(write):
    config = load_config(write("c.yml", FUNCTION))
    assert config.trial_function == "models.train:objective"
    assert shlex.split(effective_trial_command(config)) == [
        "python3",
        "-m",
        "trialflow.trial.function",
        "models.train:objective",
    ]


def test_trial_command_and_function_are_one_or_the_other(write):
    with pytest.raises(ConfigError, match="trialCommand: set trialCommand or trialFunction, not both"):
        load_config(write("c.yml", FUNCTION + "trialCommand: python3 trial.py\n"))
    inside = FUNCTION.replace("{platform: local}", "{platform: local, trialCommand: python3 t.py}")
    with pytest.raises(ConfigError, match=r"trainingService.trialCommand: set trialCommand or trialFunction"):
        load_config(write("c.yml", inside))


def test_neither_is_an_error_that_names_both(write):
    with pytest.raises(ConfigError, match="trialCommand is required .*or trialFunction"):
        load_config(write("c.yml", FUNCTION.replace("trialFunction: models.train:objective\n", "")))


@pytest.mark.parametrize(
    "value, words",
    [
        ("models.train", "expected 'package.module:function'"),
        ("os:__class__", "private and dunder names"),
        ("m:_hidden", "private and dunder names"),
        ("a b:c", "expected 'package.module:function'"),
        ("m:" + "f" * 300, "at most 200 characters"),
    ],
)
def test_a_bad_import_path_is_named_with_its_key(write, value, words):
    path = write("c.yml", FUNCTION.replace("models.train:objective", f"'{value}'"))
    with pytest.raises(ConfigError) as err:
        load_config(path)
    (problem,) = err.value.problems
    assert problem.key_path == ("trialFunction",)
    assert words in str(problem)


def test_kubernetes_roles_without_a_command_run_the_function(write):
    config = load_config(write("c.yml", KUBEFLOW))
    service = config.training_service[0]
    assert service.master.command == config.function_command  # filled from trialFunction
    assert service.worker.command == "python3 worker.py"  # its own command wins


def test_a_role_without_command_needs_a_function(write):
    text = KUBEFLOW.replace("trialFunction: models.train:objective\n", "")
    with pytest.raises(ConfigError) as err:
        load_config(write("c.yml", text))
    assert [p.key_path for p in err.value.problems] == [("trainingService", "master", "command")]
    assert "required" in str(err.value)


def test_converted_to_nni_it_is_a_trial_command(write):
    out = to_v2_dict(load_config(write("c.yml", FUNCTION)))
    assert "trialFunction" not in out
    assert out["trialCommand"] == "python3 -m trialflow.trial.function models.train:objective"


def test_a_local_function_trial_runs_with_the_tasks_own_python(write, tmp_path):
    """Issue 47 (1, third point): a worker started from a virtualenv that is not activated ran
    function trials with the ``python3`` first on PATH, which has no trialflow."""
    import sys

    from trialflow.experiment import Experiment

    local = Experiment(load_config(write("c.yml", FUNCTION)), "efn", tmp_path / "work")
    spec = local.trial_spec(0, 0, {"x": 0.5})
    assert shlex.split(spec.command) == [sys.executable, "-m", "trialflow.trial.function", "models.train:objective"]
    # NNI's YAML, a trialCommand of the author's and other platforms keep their own python
    assert effective_trial_command(local.config).startswith("python3 ")
    kube = Experiment(load_config(write("k.yml", KUBEFLOW)), "ekube", tmp_path / "work")
    assert kube.trial_spec(0, 0, {"x": 0.5}).command.startswith("python3 -m trialflow.trial.function")
    command = FUNCTION.replace("trialFunction: models.train:objective\n", "trialCommand: python3 t.py\n")
    assert Experiment(load_config(write("d.yml", command)), "ecmd", tmp_path / "w").trial_spec(0, 0, {}).command == (
        "python3 t.py"
    )

"""`trialflow validate | convert | render` on a DAG file: its experiments, configs written in it
included (issue 39, 2)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import yaml

from tests.helpers.dags import write_config
from trialflow.cli.definition import build_parser

DAG_FILE = """
from airflow.sdk import DAG
from trialflow.task_group import ExperimentTaskGroup

with DAG("two_models", schedule=None):
    ExperimentTaskGroup("tune_svc", {{
        "searchSpace": {{"C": {{"_type": "loguniform", "_value": [0.01, 10]}}}},
        "trialFunction": "models:objective",
        "trialConcurrency": {concurrency},
        "maxTrialNumber": 4,
        "tuner": {{"name": "TPE", "classArgs": {{"optimize_mode": "maximize"}}}},
        "trainingService": {{"platform": "local"}},
    }})
    ExperimentTaskGroup("tune_nni", "exp/config.yml")
"""


def run(capsys, *argv: str) -> tuple[int, str, str]:
    args = build_parser().parse_args(list(argv))
    code = args.func(args)
    out = capsys.readouterr()
    return code, out.out, out.err


def dag_file(tmp_path: Path, concurrency: int = 2) -> Path:
    write_config(tmp_path)
    (tmp_path / "models.py").write_text("def objective(params):\n    return params['C']\n")
    path = tmp_path / "two_models.py"
    path.write_text(textwrap.dedent(DAG_FILE.format(concurrency=concurrency)))
    return path


def test_validate_checks_every_experiment_of_a_dag_file(tmp_path, capsys):
    code, _, err = run(capsys, "validate", str(dag_file(tmp_path)))
    assert code == 0, err
    assert "two_models / tune_svc: OK (local; 4 trials, 2 at a time)" in err
    assert "two_models / tune_nni: OK (local; 7 trials, 3 at a time)" in err


def test_a_python_experiment_with_an_error_is_named_by_file_and_key(tmp_path, capsys):
    path = dag_file(tmp_path, concurrency=0)
    code, _, err = run(capsys, "validate", str(path))
    assert code == 1
    assert err.startswith(f"{path}: trialConcurrency: ")


def test_convert_prints_each_experiment_as_nni_yaml(tmp_path, capsys):
    code, out, _ = run(capsys, "convert", str(dag_file(tmp_path)))
    assert code == 0
    documents = list(yaml.safe_load_all(out))
    assert len(documents) == 2 and "# two_models / tune_svc" in out
    svc = documents[0]
    assert svc["trialCommand"] == "python3 -m trialflow.trial.function models:objective"
    assert "trialFunction" not in svc and svc["trialConcurrency"] == 2


def test_render_asks_which_experiment_of_several(tmp_path, capsys):
    path = dag_file(tmp_path)
    code, _, err = run(capsys, "render", str(path))
    assert code == 1 and "builds 2 experiments" in err and "--experiment" in err
    code, out, err = run(capsys, "render", str(path), "--experiment", "tune_svc", "--home", str(tmp_path / "home"))
    assert code == 0, err
    rendered = yaml.safe_load(out)
    assert "trialflow.trial.function models:objective" in str(rendered["submission"])
    code, _, err = run(capsys, "render", str(path), "--experiment", "nope")
    assert code == 1 and "no experiment named 'nope'" in err


def test_a_dag_file_without_experiments_or_that_fails_to_import(tmp_path, capsys):
    empty = tmp_path / "empty.py"
    empty.write_text("from airflow.sdk import DAG\nDAG('plain', schedule=None)\n")
    code, _, err = run(capsys, "validate", str(empty))
    assert code == 1 and "builds no experiment" in err
    broken = tmp_path / "broken.py"
    broken.write_text("raise RuntimeError('boom')\n")
    code, _, err = run(capsys, "validate", str(broken))
    assert code == 1 and "the DAG file did not import: RuntimeError: boom" in err


def test_the_version_is_the_distributions(capsys):
    import pytest

    from trialflow import __version__
    from trialflow.get_provider_info import get_provider_info

    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["--version"])
    assert exited.value.code == 0 and capsys.readouterr().out.strip() == f"trialflow {__version__}"
    versions = get_provider_info()["versions"]
    assert versions in ([], [__version__])  # the installed distribution's, when it is installed
    import tomllib

    project = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())["project"]
    assert project["version"] == __version__


INPUTS_DAG = """
from airflow.sdk import DAG
from trialflow.task_group import ExperimentTaskGroup

with DAG("inputs_dag", schedule=None):
    ExperimentTaskGroup("tune", {{
        "searchSpace": {{"C": {{"_type": "uniform", "_value": [0, 1]}}}},
        "trialFunction": {function!r},
        "trialConcurrency": 1,
        "maxTrialNumber": 2,
        "tuner": {{"name": "Random"}},
        "trainingService": {{"platform": "local"}},
    }}, inputs={{"data": "/d", "epochs": 3}})
"""


@pytest.mark.parametrize(
    ("models", "function", "said"),
    [
        ("def svc(params, data, epochs):\n    return 1.0\n", "models:svc", None),
        ("def svc(params, **inputs):\n    return 1.0\n", "models:svc", None),
        ("def svc(params, *, data, epochs=1):\n    return 1.0\n", "models:svc", None),
        # issue 46, 11: validate said OK for each of these
        (None, "nowhere:svc", "trialFunction: nowhere:svc: no module named 'nowhere' (imported from the trial code"),
        ("def svc(params, data):\n    return 1.0\n", "models:svc", "takes no argument named 'epochs'"),
        ("def svc(params):\n    return 1.0\n", "models:svc", "takes no argument named 'data'"),
        ("def other(params):\n    return 1.0\n", "models:svc", "module 'models' has no attribute 'svc'"),
        ("import not_installed_anywhere\n", "models:svc", "no module named 'not_installed_anywhere'"),
        ("raise RuntimeError('the data is not there')\n", "models:svc", "RuntimeError: the data is not there"),
        ("svc = 3\n", "models:svc", "is a int, not a function"),
    ],
)
def test_validate_imports_a_function_trial_and_checks_its_signature_against_the_inputs(
    tmp_path, capsys, models, function, said
):
    if models is not None:
        (tmp_path / "models.py").write_text(models)
    path = tmp_path / "inputs_dag.py"
    path.write_text(textwrap.dedent(INPUTS_DAG.format(function=function)))
    code, _, err = run(capsys, "validate", str(path))
    if said is None:
        assert code == 0 and "inputs_dag / tune: OK" in err, err
    else:
        assert code == 1 and said in err and "Traceback" not in err, err
        assert str(tmp_path) in err or "takes no argument" in err  # the folder it was imported from


def test_the_function_check_runs_the_module_in_a_python_of_its_own(tmp_path):
    """The module's top level runs in the child, never in the checker (it may load data, or
    exit): a module that calls sys.exit or prints to stdout is still checked."""
    import sys

    from trialflow.trial.function import check_function

    forged = "print('trialflow-check:' + '{\"not_taken\": []}')"  # a module that says "all fine" first
    (tmp_path / "m.py").write_text(f"{forged}\ndef f(params, data):\n    return 1\n")
    assert check_function("m:f", str(tmp_path), ["data", "x"]) == [
        "m:f: its signature takes no argument named 'x', which the experiment's inputs give every trial: "
        "add a parameter x (or **inputs), or drop the input"
    ]
    (tmp_path / "gone.py").write_text("import sys\nsys.exit(3)\n")
    [said] = check_function("gone:f", str(tmp_path), [])
    assert said.startswith("gone:f: could not be checked from") and "m" not in sys.modules
    (tmp_path / "broken.py").write_text("print('trialflow-check:{not json')\nimport os\nos._exit(0)\n")
    [said] = check_function("broken:f", str(tmp_path), [])
    assert said.endswith("its module's output was not the checker's")  # no traceback from a forged line
    assert check_function("os:__class__", str(tmp_path), []) == [
        "'os:__class__': private and dunder names are not trial functions"
    ]


def test_a_dag_file_records_each_experiments_dag_and_group(tmp_path):
    from trialflow.cli.dag_files import experiments_in

    found = experiments_in(str(dag_file(tmp_path)))
    assert [(b.label, b.dag_id, b.group) for b in found] == [
        ("two_models / tune_svc", "two_models", "tune_svc"),
        ("two_models / tune_nni", "two_models", "tune_nni"),
    ]


def test_run_of_a_dag_file_refuses_what_only_a_config_takes_before_starting_anything(tmp_path, capsys):
    path = dag_file(tmp_path)
    code, _, err = run(capsys, "run", str(path), "--new")
    assert code == 1 and "--new: for a config; a DAG file's run is a new DAG run each time" in err
    code, _, err = run(capsys, "run", str(path), "--dag-id", "nope")
    assert code == 1 and f"{path}: --dag-id nope: no DAG of that id builds an experiment here (two_models)" in err
    code, _, err = run(capsys, "run", str(tmp_path / "exp" / "config.yml"), "--dag-id", "two_models")
    assert code == 1 and "--dag-id two_models: only a DAG file (.py) has DAGs to choose from" in err
    broken = tmp_path / "broken.py"
    broken.write_text("raise RuntimeError('no')\n")
    code, _, err = run(capsys, "run", str(broken))
    assert code == 1 and "broken.py: the DAG file did not import: RuntimeError: no" in err
    assert not (tmp_path / ".trialflow").exists()


def test_up_and_down_name_a_file_that_is_not_there(tmp_path, capsys):
    for command in ("up", "down"):
        code, _, err = run(capsys, command, str(tmp_path / "nope.py"))
        assert code == 1 and f"{tmp_path / 'nope.py'}: no such config or DAG file" in err
    assert not (tmp_path / ".trialflow").exists()

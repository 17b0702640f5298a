"""`trialflow validate | convert | render` on a DAG file: its experiments, configs written in it
included (issue 39, 2)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import yaml

from tests.helpers.dags import write_config
from trialflow.cli import build_parser

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

    project = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]
    assert project["version"] == __version__

"""`trialflow run my_dag.py`: the author's own DAG, two experiment groups between their own tasks,
run once on a private Airflow (a real scheduler, LocalExecutor on SQLite) (issue 47, 1)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli.test_commands import cli

pytestmark = pytest.mark.integration

DAG = """\
from airflow.sdk import dag, task

from trialflow.task_group import ExperimentTaskGroup

COMMON = {{
    "searchSpace": {{"x": {{"_type": "uniform", "_value": [0, 1]}}}},
    "trialFunction": "trials:score",
    "trialCodeDirectory": ".",
    "trialConcurrency": 2,
    "maxTrialNumber": 2,
    "trainingService": {{"platform": "local"}},
}}


def tuner(seed):
    return {{"tuner": {{"name": "TPE", "classArgs": {{"optimize_mode": "maximize", "seed": seed}}}}}}


@dag(schedule=None)
def two_groups():
    @task
    def prepare() -> int:
        return 3

    scale = prepare()
    a = ExperimentTaskGroup("tune_a", {{**COMMON, **tuner(1)}}, inputs={{"scale": scale}})
    b = ExperimentTaskGroup("tune_b", {{**COMMON, **tuner(2)}}, inputs={{"scale": scale}})

    @task
    def train(a_value: float, b_value: float) -> float:
        if {fail}:
            raise RuntimeError("the final training broke on purpose")
        return max(a_value, b_value)

    train(a.best_value, b.best_value)


two_groups()
"""


def write_dag(folder: Path, fail: bool) -> Path:
    (folder / "trials.py").write_text("def score(params, scale):\n    return params['x'] * scale\n")
    path = folder / "my_dag.py"
    path.write_text(DAG.format(fail=fail))
    return path


@pytest.fixture(scope="module")
def first_run(tmp_path_factory) -> Iterator[tuple[Path, list[str], subprocess.CompletedProcess]]:
    """The DAG file run cold, its Airflow left up (`--keep-running`) for the module's next run;
    `trialflow down` at the end."""
    folder = tmp_path_factory.mktemp("dag_folder")
    path = write_dag(folder, fail=False)
    before = sorted(p.name for p in folder.iterdir())
    result = cli("run", str(path), "--json", "--keep-running", timeout=600)
    try:
        yield path, before, result
    finally:
        down = cli("down", str(path), timeout=120)
        assert down.returncode == 0 and "stopped" in down.stderr, down.stderr
        leftovers = subprocess.run(["pgrep", "-f", str(folder / ".trialflow")], capture_output=True, text=True)
        assert leftovers.stdout == "", "Airflow components must be stopped by `trialflow down`"


def test_a_dag_file_with_two_groups_runs_once_with_each_groups_progress_and_results(first_run):
    path, before, result = first_run
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Starting Airflow (DAGs folder" in result.stderr
    summary = json.loads(result.stdout)
    assert summary["dag_id"] == "two_groups" and summary["state"] == "success"
    assert [e["label"] for e in summary["experiments"]] == ["two_groups / tune_a", "two_groups / tune_b"]
    for experiment in summary["experiments"]:
        trials = experiment["trials"]
        assert [t["status"] for t in trials] == ["SUCCEEDED", "SUCCEEDED"]
        # the input from the author's prepare() reached each function trial: score = x * 3
        assert all(t["final_metric"] == pytest.approx(t["parameters"]["x"] * 3) for t in trials)
        assert experiment["best"]["final_metric"] == max(t["final_metric"] for t in trials)
        assert f"{experiment['label']}: 2/2 done" in result.stderr  # its own progress line
        assert f"Watch {experiment['label']}: http://127.0.0.1:" in result.stderr
    assert len({e["experiment_id"] for e in summary["experiments"]}) == 2
    assert summary["tasks"] == [
        {"task_id": "prepare", "state": "success", "log_tail": []},
        {"task_id": "train", "state": "success", "log_tail": []},
    ]
    # the DAG's folder is Airflow's DAGs folder, and nothing but the home is written into it
    after = sorted(p.name for p in path.parent.iterdir() if p.name not in {".trialflow", "__pycache__"})
    assert after == before
    assert "Airflow stays up in" in result.stderr and "trialflow down --home" in result.stderr


def test_a_dag_file_whose_own_task_fails_says_which_with_its_log_and_exits_non_zero(first_run):
    """The next run of the changed file, on the Airflow the first one left up: attached, the
    DAG parsed again from the changed file before it is triggered."""
    path, _, _ = first_run
    write_dag(path.parent, fail=True)
    result = cli("run", str(path), timeout=600)
    assert result.returncode == 1, result.stderr[-3000:]
    assert "Using the Airflow already up in this home" in result.stderr
    out = result.stdout
    # both experiments still trained and show their tables
    assert out.count("SUCCEEDED") == 4 and "two_groups / tune_a" in out and "two_groups / tune_b" in out
    tasks = out[out.index("Your tasks") :]
    assert "prepare │ success" in tasks and "train   │ failed" in tasks
    assert "train failed; the end of its log:" in tasks
    assert "RuntimeError: the final training broke on purpose" in tasks
    assert out.rstrip().endswith(": failed") and "DAG two_groups, run manual__" in out

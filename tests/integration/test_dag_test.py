"""Airflow's own ``dag.test()`` (what a DAG author runs in a test or a notebook) runs a DAG with an
experiment group to the end, with the best parameters downstream (issue 47, 1).

dag.test() runs one task at a time in the calling process: the watch step, which waits for
the trial tasks, would have waited for ever for tasks that run only after it (it did: the run
hung at "running trigger in line"). Here: no trialflow_default connection, as an author who only
ran `airflow db migrate` has; the store is the SQLite file under AIRFLOW_HOME.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from trialflow.platforms.base import experiment_id_for
from trialflow.store.experiment_store import ExperimentStore, sqlite_url
from trialflow.store.results import best_row

DAGS = Path(__file__).resolve().parents[2] / "dags"
SCRIPT = """\
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("digits_pipeline", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
run = module.digits_pipeline().test(mark_success_pattern="approve")  # nobody approves in a test
final = [ti for ti in run.get_task_instances() if ti.task_id == "train_final_model"][0]
print(json.dumps({"run_id": run.run_id, "state": run.state, "model": final.xcom_pull(task_ids="train_final_model")}))
"""


def dag_test(
    tmp_path: Path, folder: Path, script: str, dag_file: Path, python_on_path: bool = False
) -> subprocess.CompletedProcess:
    """``script`` run as a DAG author runs dag.test(): an AIRFLOW_HOME of its own after `airflow db
    migrate`, no trialflow connection; ``python_on_path``: this install's python3 first on PATH
    (a command trial's `python3`; a function trial needs none: it runs with the task's Python)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "TRIALFLOW"))} | {
        "AIRFLOW_HOME": str(tmp_path / "airflow"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(folder),
        "TRIALFLOW_WORKDIR": str(tmp_path / "trials"),
    }
    if python_on_path:
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    airflow = Path(sys.executable).parent / "airflow"
    migrated = subprocess.run([str(airflow), "db", "migrate"], env=env, capture_output=True, text=True, timeout=300)
    assert migrated.returncode == 0, migrated.stderr[-3000:]
    return subprocess.run(
        [sys.executable, "-c", script, str(dag_file)],
        env=env,
        capture_output=True,
        text=True,
        timeout=500,
        cwd=tmp_path,
    )


def test_dag_test_runs_the_digits_pipeline_to_the_end_with_the_best_parameters_downstream(tmp_path):
    pytest.importorskip("sklearn", reason="the digits example trains scikit-learn models")
    folder = tmp_path / "dags"
    shutil.copytree(DAGS / "experiments" / "digits", folder / "experiments" / "digits")
    source = (DAGS / "digits_pipeline.py").read_text()
    assert '"maxTrialNumber": 12' in source
    (folder / "digits_pipeline.py").write_text(source.replace('"maxTrialNumber": 12', '"maxTrialNumber": 3'))
    done = dag_test(tmp_path, folder, SCRIPT, folder / "digits_pipeline.py")
    assert done.returncode == 0, (done.stdout + done.stderr)[-5000:]
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    assert outcome["state"] == "success", done.stdout[-5000:]
    store = ExperimentStore(sqlite_url(tmp_path / "airflow" / "trialflow" / "experiments.db"))
    rows = store.trial_rows(experiment_id_for("digits_pipeline", outcome["run_id"], "tune"))
    assert [r.status for r in rows] == ["SUCCEEDED"] * 3
    top = best_row(rows, "maximize")
    model = pickle.loads(Path(outcome["model"]).read_bytes())
    assert {k: model.get_params()[k] for k in top.parameters} == top.parameters
    assert "dag.test() runs one task at a time" in done.stdout  # the watch stepped aside, saying why


UNBOUNDED = """\
experimentName: unbounded
searchSpace: {x: {_type: uniform, _value: [0, 1]}}
trialCommand: python3 t.py
trialConcurrency: 2
maxExperimentDuration: 10m
tuner: {name: Random, classArgs: {seed: 1}}
trainingService: {platform: local}
"""
UNBOUNDED_SCRIPT = """\
import json, runpy, sys
from airflow.models import DagRun
run = runpy.run_path(sys.argv[1])["dag"].test()
states = {ti.task_id: ti.state for ti in run.get_task_instances() if ti.map_index < 1}
print(json.dumps({"state": run.state, "tasks": states, "runs": len(DagRun.find(dag_id="unbounded"))}))
"""


def test_dag_test_of_an_experiment_that_goes_on_in_later_runs_says_it_starts_none(tmp_path):
    """A follow-on run would wait, queued in the local database, for a scheduler that starts it
    whenever one runs; dag.test() runs its one run and says the rest is not started."""
    folder = tmp_path / "dags"
    folder.mkdir()
    (folder / "t.py").write_text(
        "from trialflow import trial\np = trial.get_next_parameter()\ntrial.report_final_result(p['x'])\n"
    )
    (folder / "c.yml").write_text(UNBOUNDED)
    (folder / "u.py").write_text(
        "# an Airflow DAG\nfrom trialflow.dag import experiment_dag\n\n"
        "dag = experiment_dag('c.yml', dag_id='unbounded', trials_per_run=3)\n"
    )
    done = dag_test(tmp_path, folder, UNBOUNDED_SCRIPT, folder / "u.py", python_on_path=True)
    assert done.returncode == 0, (done.stdout + done.stderr)[-5000:]
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    assert outcome["state"] == "success" and outcome["runs"] == 1
    assert outcome["tasks"]["trial"] == "success" and outcome["tasks"]["continue_experiment"] == "skipped"
    assert "dag.test() runs one DAG run: the experiment would go on in run " in done.stdout
    assert "not started here; `trialflow run` or a deployment runs it" in done.stdout

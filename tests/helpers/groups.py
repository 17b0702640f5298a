"""A DAG of the author's own with two experiment task groups, written into the session's Airflow:
``prepare >> [tune_fn (function trials, a config written in the DAG file), tune_script (an NNI
script, a YAML file)] >> pick(tune_fn.best, tune_script.best)``."""

from __future__ import annotations

from pathlib import Path

from tests.helpers.airflow import PY, Harness

MODELS = """\
from pathlib import Path

import trialflow.trial as t


def objective(params, data):
    # data: the path prepare returned, given to every trial of the run as an input
    if Path(data).read_text() != "ok":
        raise ValueError(f"unexpected data at {data}")
    for step in range(2):
        t.report_intermediate_result(params["C"] * step)
    return -((params["C"] - 1.0) ** 2)
"""

SCRIPT = r"""
import os, sys, time
import nni

p = nni.get_next_parameter()
if open(os.environ["TRIALFLOW_INPUT_DATA"]).read() != "ok":  # the run's input, from prepare
    sys.exit(3)
log = os.environ.get("LAUNCHES")
if log:
    open(log, "a").write(f"start {time.time()}\n")
time.sleep(float(os.environ.get("SLEEP", "0")))
# HOLD: stay running until the log has shown that many trials running at once (bounded), so a
# test of concurrency sees the slots it expects whatever the machine's speed.
hold, deadline = int(os.environ.get("HOLD", "0")), time.time() + 120
while log and hold and time.time() < deadline:
    stamps = [line.split() for line in open(log) if line.endswith("\n")]  # whole lines only
    events = sorted((float(t), 1 if k == "start" else -1) for k, t in stamps)
    running = peak = 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    if peak >= hold:
        break
    time.sleep(0.2)
if log:
    open(log, "a").write(f"end {time.time()}\n")
nni.report_final_result(p["depth"] * 1.5)
"""

CONFIG = """\
experimentName: script trials
searchSpace: {{depth: {{_type: choice, _value: [1, 2, 3, 4]}}}}
trialCommand: {sleep}{py} script.py
trialConcurrency: 2
maxTrialNumber: {trials}
tuner: {{name: TPE, classArgs: {{optimize_mode: maximize, seed: 5}}}}
trainingService: {{platform: local}}
"""

DAG = """\
# an airflow DAG with two experiment task groups
from pathlib import Path

from airflow.sdk import DAG, task

from trialflow.task_group import ExperimentTaskGroup

FOLDER = Path({folder!r})

with DAG({dag_id!r}, schedule=None, max_active_runs=1) as dag:

    @task
    def prepare():
        (FOLDER / "prepared").write_text("ok")
        return str(FOLDER / "prepared")

    @task
    def pick(function_best, script_best, function_value, script_value):
        return {{"function": function_best, "script": script_best,
                 "values": {{"function": function_value, "script": script_value}}}}

    data = prepare()
    functions = ExperimentTaskGroup(
        "tune_fn",
        {{
            "experimentName": "function trials",
            "searchSpace": {{"C": {{"_type": "uniform", "_value": [0.1, 2.0]}}}},
            "trialFunction": "models:objective",
            "trialCodeDirectory": str(FOLDER),
            "trialConcurrency": 2,
            "maxTrialNumber": 4,
            "tuner": {{"name": "TPE", "classArgs": {{"optimize_mode": "maximize", "seed": 3}}}},
            "trainingService": {{"platform": "local"}},
        }},
        poll_interval=0.3,
        inputs={{"data": data}},
    )
    script = ExperimentTaskGroup(
        "tune_script", "script/config.yml", poll_interval=0.3, defer_after=1, inputs={{"data": data}}
    )
    data >> [functions, script]
    pick(functions.best, script.best, functions.best_value, script.best_value)
"""

GROUPS = ("tune_fn", "tune_script")


def groups_dag(
    harness: Harness, name: str, script_trials: int = 3, script_sleep: float = 0, hold: int = 0
) -> tuple[str, Path]:
    """Write the DAG (id ``it_<name>``) and its files; return (dag_id, folder). With
    ``script_sleep``, each script trial sleeps that long and stamps its start and end in
    ``folder/stamps``; with ``hold``, it then stays until ``hold`` trials have run at once (at
    most 120 s): a fixed sleep was shorter than a trial's start on a loaded machine, and the
    trials never overlapped as the test expected."""
    folder = harness.root / "experiments" / name
    (folder / "script").mkdir(parents=True, exist_ok=True)
    (folder / "models.py").write_text(MODELS)
    (folder / "script" / "script.py").write_text(SCRIPT)
    sleep = f"LAUNCHES={folder / 'stamps'} SLEEP={script_sleep} HOLD={hold} " if script_sleep or hold else ""
    (folder / "script" / "config.yml").write_text(CONFIG.format(sleep=sleep, py=PY, trials=script_trials))
    dag_id = f"it_{name}"
    dag_file = harness.airflow.dags_folder / f"{name}.py"
    # the YAML path is relative to the DAG file: the DAG file lives in the DAGs folder
    source = DAG.format(folder=str(folder), dag_id=dag_id).replace(
        '"script/config.yml"', repr(str(folder / "script" / "config.yml"))
    )
    dag_file.write_text(source)
    harness.dag_files[dag_id] = dag_file
    return dag_id, folder

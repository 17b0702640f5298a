"""Lineage under Airflow's OpenLineage provider and its real listener, on an Airflow of its own
(OpenLineage configured: a file transport), so the session's Airflow stays a deployment
without listeners. The end step's COMPLETE event carries trialflow's run facet; a DAG with the
trial operator on its own still parses (Airflow's DAG bag refuses ``end_from_trigger`` once a
listener is loaded) and a deferred trial's task is ended by the worker, so listeners see it."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.airflow import PY, running_airflow
from tests.helpers.airflow_controls import wait_for
from trialflow.cli.embedded import EmbeddedAirflow

pytestmark = pytest.mark.integration
pytest.importorskip("airflow.providers.openlineage", reason="the OpenLineage provider (the dev group) is needed")

CONFIG = (
    "searchSpace: {{x: {{_type: uniform, _value: [0, 1]}}, opt: {{_type: choice, _value: [sgd, adam]}}}}\n"
    "trialCommand: {py} t.py\n"
    "trialConcurrency: 2\nmaxTrialNumber: 3\ntuner: {{name: Random, classArgs: {{seed: 4}}}}\n"
    "trainingService: {{platform: local}}\n"
)
TRIAL = (
    "import time\nfrom trialflow import trial\np = trial.get_next_parameter()\ntime.sleep(2)\n"
    "trial.report_final_result(p['x'])\n"
)


@pytest.fixture(scope="module")
def lineage_airflow(tmp_path_factory) -> Iterator[tuple[EmbeddedAirflow, Path]]:
    root = tmp_path_factory.mktemp("lineage")
    transport = {"type": "file", "log_file_path": str(root / "lineage.jsonl"), "append": True}
    env = {
        "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(transport),
        "AIRFLOW__OPENLINEAGE__NAMESPACE": "trialflow-tests",
    }
    with running_airflow(root, 4, env) as airflow:
        yield airflow, root


def events_of(path: Path) -> list[dict[str, Any]]:
    """The events written so far: a line without its newline is still being written."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().split("\n")[:-1] if line]


def test_the_end_steps_event_carries_the_experiment(lineage_airflow):
    airflow, root = lineage_airflow
    folder = root / "experiments" / "lineage"
    folder.mkdir(parents=True)
    (folder / "config.yml").write_text(CONFIG.format(py=PY))
    (folder / "t.py").write_text(TRIAL)
    dag_file = airflow.dags_folder / "lineage.py"
    dag_file.write_text(
        "# airflow DAG\nfrom trialflow.dag import experiment_dag\n"
        f"dag = experiment_dag({str(folder / 'config.yml')!r}, dag_id='lineage', poll_interval=0.3)\n"
    )
    airflow.wait_for_dag("lineage", dag_file, timeout=90)
    run_id = airflow.trigger("lineage")
    assert wait_for("the run", lambda: airflow.dag_run_state("lineage", run_id) in ("success", "failed"), 180)
    assert airflow.dag_run_state("lineage", run_id) == "success"
    summary_response = airflow.api(
        "GET",
        f"/dags/lineage/dagRuns/{run_id}/taskInstances/end_experiment/xcomEntries/return_value",
        params={"deserialize": True},
    )
    summary = summary_response.json()["value"]
    summary = json.loads(summary) if isinstance(summary, str) else summary

    def complete() -> dict[str, Any] | None:
        return next(
            (
                e
                for e in events_of(root / "lineage.jsonl")
                if e.get("eventType") == "COMPLETE" and e["job"]["name"] == "lineage.end_experiment"
            ),
            None,
        )

    event = wait_for("the end step's COMPLETE event", complete, timeout=60)
    facet = event["run"]["facets"]["trialflow_experiment"]
    assert facet["experimentId"] == summary["experiment_id"]
    assert facet["searchSpace"]["opt"] == {"_type": "choice", "_value": ["sgd", "adam"]}
    assert (facet["bestTrialId"], facet["bestParameters"], facet["bestMetric"]) == (
        summary["best"]["trial_id"],
        summary["best"]["parameters"],
        summary["best"]["final_metric"],
    )
    assert facet["trialCounts"] == {"SUCCEEDED": 3}
    assert facet["_schemaURL"].startswith("https://openlineage.io/")


def test_a_lone_trial_operator_parses_and_its_deferred_task_ends_in_the_worker(lineage_airflow):
    airflow, root = lineage_airflow
    folder = root / "experiments" / "lone"
    folder.mkdir(parents=True)
    (folder / "config.yml").write_text(CONFIG.format(py=PY).replace("maxTrialNumber: 3", "maxTrialNumber: 1"))
    (folder / "t.py").write_text(TRIAL)
    dag_file = airflow.dags_folder / "lone.py"
    config = str(folder / "config.yml")
    dag_file.write_text(
        "# airflow DAG: the trial operator on its own, deferring at once\n"
        "from airflow.sdk import DAG\n"
        "from trialflow.operators.experiment import StartExperimentOperator\n"
        "from trialflow.operators.trial import SubmitTrialOperator\n"
        "with DAG('lone', schedule=None):\n"
        f"    StartExperimentOperator(task_id='start_experiment', config_path={config!r}) >> SubmitTrialOperator(\n"
        f"        task_id='trial', config_path={config!r}, trial_index=0, defer_after=0, poll_interval=0.3)\n"
    )
    airflow.wait_for_dag("lone", dag_file, timeout=90)  # with end_from_trigger kept as such, an import error
    run_id = airflow.trigger("lone")
    assert wait_for("the run", lambda: airflow.dag_run_state("lone", run_id) in ("success", "failed"), 180)
    assert airflow.dag_run_state("lone", run_id) == "success"
    (trial,) = [ti for ti in airflow.task_instances("lone", run_id) if ti["task_id"] == "trial"]
    assert trial["state"] == "success" and trial["try_number"] == 1

    def completes() -> list[dict[str, Any]]:
        return [
            e
            for e in events_of(root / "lineage.jsonl")
            if e.get("eventType") == "COMPLETE" and e["job"]["name"] == "lone.trial"
        ]

    # The task runner tells the listener after it reports the task's state, so the run can be
    # success a moment before the event is written (CI saw 0 events when read at once).
    wait_for("the trial task's COMPLETE event", completes, timeout=60)
    time.sleep(1)  # a second event (the task ended twice) would come within the same moment
    assert len(completes()) == 1  # the worker ended it: the listener saw the trial task end

"""The local platform under the CeleryExecutor, with workers on two hosts (issue 16).

A local trial is a process of the host that starts it. These tests run a real experiment
through Celery with two worker hosts and check that its trials all ran on the host of the
pinned queue and were followed there, and that the same experiment without a queue is refused
when its DAG file is parsed, with the reason in Airflow's import errors.
"""

from __future__ import annotations

import time

import pytest

from tests.helpers.deployment import Deployment
from trialflow.platforms.base import experiment_id_for
from trialflow.store.experiment_store import ExperimentStore

pytestmark = pytest.mark.integration

CONFIG = """\
searchSpace: {x: {_type: uniform, _value: [0, 1]}}
trialCommand: python3 trial.py
trialCodeDirectory: .
trialConcurrency: 2
maxTrialNumber: 6
tuner: {name: Random}
trainingService: {platform: local}
"""
# It reports the host it ran on with its result: the proof of where the process lived.
TRIAL = """\
import socket, time
from trialflow import trial
x = trial.get_next_parameter()["x"]
trial.report_intermediate_result(x / 2)
time.sleep(2)
trial.report_final_result({"default": x, "host": socket.gethostname()})
"""


def experiment(cluster: Deployment, name: str, dag_arguments: str) -> tuple[str, str]:
    folder = cluster.root / "experiments" / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.yml").write_text(CONFIG)
    (folder / "trial.py").write_text(TRIAL)
    dag_id = f"cluster_{name}"
    dag_file = cluster.airflow.dags_folder / f"{name}.py"
    dag_file.write_text(
        "# airflow DAG\nfrom trialflow.dag import experiment_dag\n"
        f"dag = experiment_dag({str(folder / 'config.yml')!r}, dag_id={dag_id!r}, {dag_arguments})\n"
    )
    return dag_id, str(dag_file)


def wait_for_run(cluster: Deployment, dag_id: str, run_id: str, timeout: float = 300) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = cluster.airflow.dag_run_state(dag_id, run_id)
        if state in ("success", "failed"):
            return state
        for host, worker in cluster.workers.items():
            assert worker.process.poll() is None, f"worker {host} died"
        time.sleep(0.5)
    raise TimeoutError(f"{dag_id} did not finish in {timeout} s")


def test_local_trials_run_and_are_followed_on_the_host_of_their_queue(cluster: Deployment):
    """``defer_after=0`` would send every trial to the triggerer at once, which runs on another
    host than worker-a and cannot see the trial's process: each trial must still be followed in
    its worker, succeed on its first try, and have run on worker-a (the only host serving box-a)
    although worker-b serves the default queue."""
    from pathlib import Path

    dag_id, dag_file = experiment(cluster, "pinned", "local_queue='box-a', defer_after=0, poll_interval=0.3")
    cluster.airflow.wait_for_dag(dag_id, Path(dag_file), timeout=120)
    run_id = cluster.airflow.trigger(dag_id)
    assert wait_for_run(cluster, dag_id, run_id) == "success"
    every = cluster.airflow.task_instances(dag_id, run_id)
    assert [ti["state"] for ti in every if ti["task_id"] == "continue_experiment"] == ["skipped"]  # bounded
    # the run's watch ends in the triggerer (any host): it reconciles from there, nothing runs
    assert [ti["state"] for ti in every if ti["task_id"] == "watch_trials"] == ["success"]
    tis = [ti for ti in every if ti["task_id"] not in ("continue_experiment", "watch_trials")]
    assert len(tis) == 9  # start, six trials, end, publish_best
    for ti in tis:
        assert (ti["state"], ti["hostname"], ti["try_number"], ti["queue"]) == ("success", "worker-a", 1, "box-a"), ti
    rows = ExperimentStore(cluster.store_url).trial_rows(experiment_id_for(dag_id, run_id))
    assert len(rows) == 6
    for row in rows:
        assert row.status == "SUCCEEDED", row
        assert row.final_metric_raw["host"] == "worker-a", row
        assert row.intermediate_count == 1, row


def test_without_a_queue_the_experiment_is_refused_when_parsed(cluster: Deployment):
    dag_id, dag_file = experiment(cluster, "unpinned", "poll_interval=0.3")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        errors = cluster.airflow.api("GET", "/importErrors", params={"limit": 100}).json()["import_errors"]
        mine = [e for e in errors if e["filename"] == dag_file or e["filename"].endswith("unpinned.py")]
        if mine:
            break
        time.sleep(1)
    else:
        raise AssertionError(f"no import error for {dag_file}")
    trace = mine[0]["stack_trace"]
    assert "trainingService.platform: 'local' runs each trial as a process" in trace
    assert str(cluster.root / "experiments" / "unpinned" / "config.yml") in trace
    assert "CeleryExecutor" in trace and "local_queue" in trace
    assert cluster.airflow.api("GET", f"/dags/{dag_id}").status_code == 404

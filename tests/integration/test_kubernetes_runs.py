"""Kubernetes experiments under the real scheduler and triggerer: an Airflow Kubernetes connection
names the test kube-apiserver; the test controller plays the operator and the kubelet."""

from __future__ import annotations

import json
import os
import signal
import uuid

import pytest

from tests.helpers.airflow import Harness
from tests.helpers.kube.controller import TestController
from tests.helpers.mlflow_server import CONN_ID as MLFLOW_CONN
from tests.helpers.mlflow_server import steps, tracked_runs
from trialflow.platforms.base import experiment_id_for
from trialflow.platforms.kubernetes.manifests import object_name

pytestmark = [pytest.mark.integration, pytest.mark.kube]

TRIAL = """\
import os, time
import trialflow.trial as t
p = t.get_next_parameter()
for i in range(3):
    t.report_intermediate_result(i + p["x"])
    time.sleep(float(os.environ.get("STEP", "0.7")))
t.report_final_result(p["x"] * 10)
"""


def kube_config(conn_id: str, trials: int, concurrency: int, extra: str = "") -> str:
    return (
        f"searchSpace: {{x: {{_type: uniform, _value: [0, 1]}}}}\ntrialConcurrency: {concurrency}\n"
        f"maxTrialNumber: {trials}\ntuner: {{name: Random}}\ntrialCodeDirectory: .\n"
        f"trainingService: {{platform: kubeflow, operator: pytorch-operator, kubernetesConnId: {conn_id},\n"
        f"  master: {{replicas: 1, command: python3 trial.py, cpuNumber: 1, memorySize: 256mb}}{extra}}}\n"
    )


@pytest.fixture(scope="module")
def kube_conn(harness: Harness, kube_controller: TestController, kube_cluster) -> str:
    conn_id = "kube_test"
    response = harness.airflow.api(
        "POST",
        "/connections",
        json={
            "connection_id": conn_id,
            "conn_type": "kubernetes",
            "extra": json.dumps({"kube_config_path": str(kube_cluster.kubeconfig)}),
        },
    )
    assert response.status_code in (200, 201, 409), response.text
    return conn_id


def test_an_experiment_on_kubeflow_followed_by_the_triggerer(
    harness: Harness, kube_conn: str, kube_controller: TestController, mlflow_server
):
    dag_source = (
        "# airflow DAG\nfrom trialflow.dag import experiment_dag\n"
        "dag = experiment_dag('{CONFIG}', dag_id='{DAG_ID}', poll_interval=0.3, defer_after=0.5,\n"
        "                     cleanup=True)\n"
    )
    tracked = f"kube-{uuid.uuid4().hex[:8]}"  # logged to MLflow from the Airflow side: no pod reaches it
    config = kube_config(kube_conn, 3, 2) + f"mlflow: {{connId: {MLFLOW_CONN}, experimentName: {tracked}}}\n"
    dag_id, _ = harness.experiment("kube", config, {"trial.py": TRIAL}, dag_source=dag_source)
    deferred: set[int] = set()

    def watch(run_id: str) -> None:
        deferred.update(ti["map_index"] for ti in harness.tis(dag_id, run_id) if ti["state"] == "deferred")

    run_id, state = harness.run(dag_id, timeout=300, on_tick=watch)
    assert state == "success", kube_controller.errors
    assert deferred, "no trial was followed by the triggerer"
    rows = harness.rows(dag_id, run_id)
    assert [r.status for r in rows] == ["SUCCEEDED"] * 3
    for r in rows:
        assert r.final_metric == pytest.approx(r.parameters["x"] * 10)
        assert r.intermediate_count == 3
    result = harness.xcom(dag_id, run_id, "trial", 0)
    assert result["platform"] == "kubeflow" and "kube_test" in result["host"]
    parent, runs = tracked_runs(mlflow_server, tracked)
    assert parent.info.status == "FINISHED" and len(runs) == 3
    for row, run in zip(rows, runs):
        assert run.data.tags["trialflow.platform"] == "kubeflow" and run.info.status == "FINISHED"
        assert steps(mlflow_server, run) == [(i, pytest.approx(i + row.parameters["x"])) for i in range(3)]
        assert run.data.metrics["final"] == pytest.approx(row.final_metric)
    exp = experiment_id_for(dag_id, run_id)
    for i in range(3):
        assert kube_controller.launches(object_name(f"{exp}-{i:04d}")) == 1
    # cleanup=True: the end step removed the experiment's jobs and ConfigMaps
    listing = kube_controller.custom.list_namespaced_custom_object(
        "kubeflow.org", "v1", "default", "pytorchjobs", label_selector=f"trialflow.io/experiment={exp}"
    )
    assert listing["items"] == []
    assert (
        kube_controller.core.list_namespaced_config_map(
            "default", label_selector=f"trialflow.io/experiment={exp}"
        ).items
        == []
    )


def test_a_killed_worker_is_retried_and_reattaches_to_its_job(
    harness: Harness, kube_conn: str, kube_controller: TestController
):
    dag_source = (
        "# airflow DAG\nfrom datetime import timedelta\nfrom trialflow.dag import experiment_dag\n"
        "dag = experiment_dag('{CONFIG}', dag_id='{DAG_ID}', poll_interval=0.3, defer_after=120,\n"
        "                     start_trials_in='worker',  # a worker to kill while it follows\n"
        "                     default_args={'retries': 2, 'retry_delay': timedelta(seconds=1)})\n"
    )
    trial = TRIAL.replace('"0.7"', '"3"')
    dag_id, _ = harness.experiment("kubekill", kube_config(kube_conn, 1, 1), {"trial.py": trial}, dag_source=dag_source)
    killed: list[int] = []

    def kill_trial_worker(run_id: str) -> None:
        if killed:
            return
        name = object_name(f"{experiment_id_for(dag_id, run_id)}-0000")
        (ti,) = harness.tis(dag_id, run_id) or [None]
        if ti and ti["state"] == "running" and ti.get("pid") and kube_controller.job(name) is not None:
            os.kill(ti["pid"], signal.SIGKILL)
            killed.append(ti["pid"])

    run_id, state = harness.run(dag_id, timeout=300, on_tick=kill_trial_worker)
    assert killed, "the trial's worker was never seen running"
    assert state == "success"
    (ti,) = harness.tis(dag_id, run_id)
    assert ti["try_number"] >= 2
    name = object_name(f"{experiment_id_for(dag_id, run_id)}-0000")
    assert kube_controller.launches(name) == 1  # re-attached by name, not started again
    (row,) = harness.rows(dag_id, run_id)
    assert row.status == "SUCCEEDED" and row.intermediate_count == 3


def test_marking_a_deferred_kubeflow_trial_failed_deletes_its_job(
    harness: Harness, kube_conn: str, kube_controller: TestController
):
    """Airflow's Mark failed on a trial the triggerer follows: its PyTorchJob is deleted (the
    controller kills its replicas) and the store says USER_CANCELED, why."""
    import time

    from tests.helpers.airflow_controls import patch_ti, store_row, wait_for

    dag_source = (
        "# airflow DAG\nfrom trialflow.dag import experiment_dag\n"
        "dag = experiment_dag('{CONFIG}', dag_id='{DAG_ID}', poll_interval=0.3, defer_after=0.5)\n"
    )
    long_trial = TRIAL.replace('os.environ.get("STEP", "0.7")', '"100"')
    dag_id, _ = harness.experiment(
        "kube_kill", kube_config(kube_conn, 1, 1), {"trial.py": long_trial}, dag_source=dag_source
    )
    harness.airflow.wait_for_dag(dag_id, harness.dag_files[dag_id], timeout=90)
    run_id = harness.airflow.trigger(dag_id)
    name = object_name(f"{experiment_id_for(dag_id, run_id)}-0000")
    wait_for(
        "the job running and its task deferred",
        lambda: (
            kube_controller.running_processes() > 0
            and [ti.get("triggerer_job") and ti["state"] for ti in harness.tis(dag_id, run_id)] == ["deferred"]
        ),
        120,
    )
    patch_ti(harness, dag_id, run_id, 0, "failed")
    started = time.monotonic()

    def deleted() -> bool:
        from kubernetes.client.exceptions import ApiException

        try:
            kube_controller.custom.get_namespaced_custom_object("kubeflow.org", "v1", "default", "pytorchjobs", name)
        except ApiException as exc:
            return exc.status == 404
        return False

    wait_for("the PyTorchJob deleted", deleted, 30)
    took = time.monotonic() - started
    row = wait_for(
        "the store to close the trial",
        lambda: (r := store_row(harness, dag_id, run_id, 0)).status == "USER_CANCELED" and r,
    )
    assert row.message.startswith("stopped from Airflow: its task was marked failed")
    wait_for("its replicas killed", lambda: (job := kube_controller.job(name)) is not None and job.stopped, 30)
    harness.wait(dag_id, run_id, 120)
    assert kube_controller.launches(name) == 1
    print(f"mark failed (kubeflow, triggerer): job deleted {took:.1f} s after the PATCH")


def test_marking_kubeflow_trials_failed_across_the_hand_off_leaves_no_job_running(
    harness: Harness, kube_conn: str, kube_controller: TestController
):
    """Issue 36 (1) on Kubeflow: each trial's task is marked failed at another instant around
    its hand-off from the worker to the triggerer (defer_after 2 s). Every PyTorchJob ends
    stopped (the controller killed its replicas), every trial is closed in the store, and no
    job was launched twice; the clicks no on_kill saw are closed by the run's watch."""
    import time

    from tests.helpers.airflow_controls import all_closed, mark_failed_across_the_hand_off, wait_for

    offsets = [1.0, 1.9, 2.1, 2.3, 2.6, 3.5]
    dag_source = (
        "# airflow DAG\nfrom trialflow.dag import experiment_dag\n"
        "dag = experiment_dag('{CONFIG}', dag_id='{DAG_ID}', poll_interval=0.3, defer_after=2,\n"
        "                     start_trials_in='worker')\n"
    )
    long_trial = TRIAL.replace('os.environ.get("STEP", "0.7")', '"100"')
    dag_id, _ = harness.experiment(
        "kube_hand_off",
        kube_config(kube_conn, len(offsets), len(offsets)),
        {"trial.py": long_trial},
        dag_source=dag_source,
    )
    harness.airflow.wait_for_dag(dag_id, harness.dag_files[dag_id], timeout=90)
    run_id = harness.airflow.trigger(dag_id)
    mark_failed_across_the_hand_off(harness.airflow, harness.store_url, dag_id, run_id, offsets)
    last_click = time.monotonic()
    exp = experiment_id_for(dag_id, run_id)
    names = [object_name(f"{exp}-{i:04d}") for i in range(len(offsets))]

    def seen() -> str:  # what a timeout says: each job, its trial and its task, and the triggerer
        rows = {r.trial_index: r for r in harness.rows(dag_id, run_id)}
        tis = {ti["map_index"]: ti["state"] for ti in harness.tis(dag_id, run_id)}
        jobs = [kube_controller.job(n) for n in names]
        return (
            "; ".join(
                f"trial {i}: job {'none' if job is None else 'stopped' if job.stopped else 'running'}, "
                f"task {tis.get(i)}, store {(rows[i].status, rows[i].message) if i in rows else None}"
                for i, job in enumerate(jobs)
            )
            + f"; restarts of the session's Airflow: {[(r.component, r.exit_code) for r in harness.airflow.restarts]}"
        )

    wait_for(
        "every job stopped",
        lambda: all((job := kube_controller.job(n)) is None or job.stopped for n in names),
        60,
        why=seen,
    )
    took = time.monotonic() - last_click
    rows = all_closed(harness, dag_id, run_id)
    harness.wait(dag_id, run_id, 180)
    assert all(r.status == "USER_CANCELED" for r in rows), rows
    assert all(kube_controller.launches(n) <= 1 for n in names)
    print(
        f"mark failed across the hand-off (kubeflow): every job stopped {took:.1f} s after the last click\n"
        + "\n".join(f"  +{o:.2f} s: {r.message}" for o, r in zip(offsets, sorted(rows, key=lambda r: r.trial_index)))
    )


# make test-extended (72 s here): two generations of PBT on kubeflow are run by
# tests/kube/test_checkpoints.py::test_population_based_training_of_two_generations_of_four_on_kubeflow,
# and PBT under the real scheduler by tests/integration/test_population_runs.py (local platform).
@pytest.mark.extended
def test_population_based_training_on_kubeflow_under_the_scheduler(
    harness: Harness, kube_conn: str, kube_controller: TestController, tmp_path
):
    """PBT, two generations of four, on kubeflow through mounted storage, followed by the
    triggerer: every child's parent is what its page shows (the trial detail the page reads), and
    each trial's checkpoint is in the store. (With four slots for four members, whether a
    second-generation task finds the first still running is a matter of timing: the local test
    with three slots makes it certain.)"""
    from pathlib import Path

    from trialflow import queries
    from trialflow.checkpoints.keeper import TrialCheckpoints

    pytest.importorskip("sklearn")
    example = Path(__file__).resolve().parents[2] / "dags" / "experiments" / "digits-pbt"
    share = tmp_path / "share"
    share.mkdir()
    kube_controller.storage[("nfs", "10.0.9.9", "/exports/pbt")] = share
    mount = f"/tmp/trialflow-it-mount-{os.getpid()}"
    config = (
        "searchSpaceFile: search_space.json\ntrialCodeDirectory: .\ntrialConcurrency: 4\nmaxTrialNumber: 8\n"
        "tuner: {name: PBTTuner, classArgs: {optimize_mode: maximize, population_size: 4}}\n"
        f"trainingService: {{platform: kubeflow, operator: tf-operator, kubernetesConnId: {kube_conn},\n"
        "  worker: {replicas: 1, command: python3 train.py, cpuNumber: 1, memorySize: 256mb},\n"
        f"  storage: {{storageType: nfs, server: 10.0.9.9, path: /exports/pbt, localMountPoint: '{share}',\n"
        f"             containerMountPoint: '{mount}'}}}}\n"
    )
    files = {name: (example / name).read_text() for name in ("train.py", "search_space.json")}
    dag_id, run_id = harness.start("kube_pbt", config, files, dag_args="defer_after=0.5")
    seen: set[str] = set()

    def watch(_: str) -> None:
        seen.update(f"{ti['map_index']}:{ti['state']}" for ti in harness.tis(dag_id, run_id))

    _, state = harness.wait(dag_id, run_id, timeout=300, on_tick=watch)
    assert state == "success", kube_controller.errors
    assert any(s.endswith(":deferred") for s in seen), sorted(seen)  # the triggerer followed them
    rows = harness.rows(dag_id, run_id)
    assert [r.status for r in rows] == ["SUCCEEDED"] * 8
    experiment = experiment_id_for(dag_id, run_id)
    store = harness.store
    root = Path(store.experiment_attr(experiment, "artifacts")["url"].removeprefix("file://"))
    for index in range(8):
        detail = queries.trial_detail(store.engine, experiment, index)
        lineage = detail["lineage"]
        assert lineage["generation"] == index // 4 and lineage["member"] == index % 4
        if index >= 4:
            assert lineage["parent_index"] in range(4) and lineage["loaded_step"] == 1, lineage
        assert TrialCheckpoints(root, experiment, detail["trial_id"]).steps() == [1]

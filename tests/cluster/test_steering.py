"""The pages' actions across hosts (issue 28, part 4): under the CeleryExecutor deployment, an
action taken through the api-server reaches trials that run on the SSH machine and are followed
by a Celery worker or by the triggerer, on hosts of their own. Kill one, lower the concurrency,
stop the experiment: every trial ends once, none is left running, none starts twice, and
nothing of the stopped run starts afterwards."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import httpx
import pytest

from tests.cluster.test_faults import remote_experiment, start_log, wait_until
from tests.helpers.deployment import Deployment, report_fault
from trialflow.platforms.base import experiment_id_for
from trialflow.store.experiment_store import ExperimentStore

pytestmark = pytest.mark.integration


def act(cluster: Deployment, method: str, path: str, body: Any = None) -> httpx.Response:
    return httpx.request(
        method,
        f"{cluster.airflow.base_url}/trialflow/api/{path}",
        headers=cluster.airflow._headers(),
        json=body,
        timeout=60,
    )


def test_kill_lower_concurrency_and_stop_reach_trials_on_other_hosts(cluster: Deployment, ssh_machine):
    log = start_log()
    # defer_after 4 s of an 8 s trial: each trial is followed first by a worker, then by the triggerer.
    dag_id, dag_file = remote_experiment(cluster, ssh_machine, "steered", log, trials=24, defer_after=4)
    cluster.airflow.wait_for_dag(dag_id, dag_file, timeout=120)
    started_at = time.monotonic()
    run_id = cluster.airflow.trigger(dag_id)
    experiment_id = experiment_id_for(dag_id, run_id)
    store = ExperimentStore(cluster.store_url)

    def running() -> list[dict[str, Any]]:
        try:
            return [r for r in store.trial_rows(experiment_id) if r.status == "RUNNING"]
        except KeyError:
            return []

    first = wait_until(lambda: len(running()) >= 4 and running(), 180, "four trials running on the SSH machine")
    victim = first[0].trial_index
    response = act(cluster, "POST", f"experiments/{experiment_id}/trials/{victim}/kill")
    assert response.status_code == 200, response.text
    response = act(cluster, "PATCH", f"experiments/{experiment_id}/limits", {"trialConcurrency": 2})
    assert response.status_code == 200 and response.json()["dag_parse_requested"], response.text

    def killed() -> bool:
        row = next(r for r in store.trial_rows(experiment_id) if r.trial_index == victim)
        return row.status == "USER_CANCELED" and row.message == "killed by trialflow"

    wait_until(killed, 60, "the killed trial to end USER_CANCELED")

    lowered_at = time.monotonic()
    # The lower limit reaches the scheduler within seconds (a parse of the DAG file); trials
    # already running finish (8 s). From then on, at most two run at once, and new ones start.
    wait_until(lambda: time.monotonic() - lowered_at > 20, 30, "the old trials to finish")
    started_before = len(log.read_text().split())
    at_once = []
    while time.monotonic() - lowered_at < 40:
        at_once.append(len(running()))
        time.sleep(0.5)
    assert max(at_once) <= 2 and len(log.read_text().split()) > started_before, at_once
    response = act(cluster, "POST", f"experiments/{experiment_id}/stop")
    assert response.status_code == 200, response.text
    started_by_the_stop = set(log.read_text().split())
    state = wait_until(
        lambda: (s := cluster.airflow.dag_run_state(dag_id, run_id)) in ("success", "failed") and s,
        300,
        "the run to end",
        interval=1.0,
    )
    rows = store.trial_rows(experiment_id)
    starts = Counter(log.read_text().split())
    report_fault(
        {
            "fault": "page actions: kill, concurrency 4 -> 2, stop (SSH machine, worker + triggerer)",
            "trials": len(rows),
            "started": len(starts),
            "finished": sum(r.status in ("SUCCEEDED", "USER_CANCELED") for r in rows),
            "lost": sum(r.status not in ("SUCCEEDED", "USER_CANCELED") for r in rows),
            "duplicated": sum(n - 1 for n in starts.values()),
            "retried tasks": 0,
            "wall s": round(time.monotonic() - started_at, 1),
        }
    )
    assert set(starts.values()) == {1}, f"trials started more than once: {starts}"
    assert set(starts) <= {r.trial_id for r in rows}  # every started trial is in the store
    assert all(r.status in ("SUCCEEDED", "USER_CANCELED") for r in rows), rows  # none left running
    # Nothing started after the stop, but the trials whose launch was under way when it came:
    # at most the two slots, each closed as soon as its launch returned (it sees the stop's mark).
    # One of them may have been stopped before its script's first line wrote its stamp (seen
    # once in a full run: in the store, USER_CANCELED, no stamp).
    late = (set(starts) - started_by_the_stop) | ({r.trial_id for r in rows} - set(starts))
    assert len(late) <= 2, late
    assert all(r.status == "USER_CANCELED" for r in rows if r.trial_id in late), rows
    assert any(r.status == "USER_CANCELED" and "experiment stopped by trialflow" in r.message for r in rows)
    assert len(rows) < 24 and state == "success"  # the end step found results; the rest never started
    tis = [ti for ti in cluster.airflow.task_instances(dag_id, run_id) if ti["task_id"] == "trial"]
    assert all(ti["state"] in ("success", "skipped") for ti in tis), [(ti["map_index"], ti["state"]) for ti in tis]


def test_mark_failed_across_the_hand_off_leaves_nothing_running(cluster: Deployment, ssh_machine):
    """Issue 36 (1) under the CeleryExecutor: each trial task (on the SSH machine, followed by a
    Celery worker for 2 s, then by the triggerer) is marked failed at another instant around its
    hand-off. None may be left running on the machine or RUNNING in the store, none starts
    twice; the clicks no on_kill saw are closed by the run's watch or its end step."""
    import subprocess

    from tests.helpers.airflow_controls import mark_failed_across_the_hand_off

    log = start_log()
    offsets = [1.0, 1.8, 2.0, 2.15, 2.3, 2.5, 3.0, 4.0]
    dag_id, dag_file = remote_experiment(cluster, ssh_machine, "hand_off", log, trials=len(offsets), defer_after=2)
    cluster.airflow.wait_for_dag(dag_id, dag_file, timeout=120)
    started_at = time.monotonic()
    run_id = cluster.airflow.trigger(dag_id)
    mark_failed_across_the_hand_off(cluster.airflow, cluster.store_url, dag_id, run_id, offsets)
    wait_until(
        lambda: cluster.airflow.dag_run_state(dag_id, run_id) in ("success", "failed"), 300, "the run to end", 1.0
    )
    rows = ExperimentStore(cluster.store_url).trial_rows(experiment_id_for(dag_id, run_id))
    starts = Counter(log.read_text().split())
    left = subprocess.run(["pgrep", "-u", ssh_machine.user, "-f", "t.py"], capture_output=True, text=True).stdout
    report_fault(
        {
            "fault": "mark failed across the hand-off (SSH machine, worker -> triggerer)",
            "trials": len(offsets),
            "started": len(starts),
            "finished": sum(r.status in ("SUCCEEDED", "USER_CANCELED") for r in rows),
            "lost": sum(r.status in ("RUNNING", "WAITING") for r in rows) + len(left.split()),
            "duplicated": sum(n - 1 for n in starts.values()),
            "retried tasks": 0,
            "wall s": round(time.monotonic() - started_at, 1),
        }
    )
    assert set(starts.values()) == {1}, f"trials started more than once: {starts}"
    assert not [r for r in rows if r.status in ("RUNNING", "WAITING")], rows
    assert left == "", f"trial processes left on the SSH machine: {left}"
    # a click just after a trial ended on its own leaves its success; every other one stopped it
    assert all(r.status in ("SUCCEEDED", "USER_CANCELED") for r in rows), rows
    tis = [ti for ti in cluster.airflow.task_instances(dag_id, run_id) if ti["task_id"] == "trial"]
    assert {ti["state"] for ti in tis} == {"failed"}, [(ti["map_index"], ti["state"]) for ti in tis]

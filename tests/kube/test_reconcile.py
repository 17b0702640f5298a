"""A stop half done on Kubeflow, against a real kube-apiserver (the test controller plays the
operator and the kubelet): the trial closed in the store, its job still running, is found from
the stop's note and its job deleted (trialflow.runs.reconcile.finish_job_stops)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from tests.helpers.kube.cluster import KubeCluster
from tests.helpers.kube.controller import TestController
from tests.helpers.stoppers import StopperDies
from tests.kube.test_platforms import TRIAL, experiment_id
from trialflow.config import load_config
from trialflow.experiment import Experiment
from trialflow.lifecycle import trial_lifecycle
from trialflow.platforms.base import TrialStatus
from trialflow.runs import start_run
from trialflow.runs.reconcile import finish_job_stops

pytestmark = pytest.mark.kube


def _until(check, what: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def test_a_kubeflow_trial_closed_while_its_job_runs_has_its_job_deleted(
    tmp_path: Path, store, kube_cluster: KubeCluster, kube_controller: TestController
):
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "trial.py").write_text(TRIAL)
    (tmp_path / "config.yml").write_text(
        "searchSpace: {x: {_type: uniform, _value: [0, 1]}}\ntrialCodeDirectory: code\n"
        "trialConcurrency: 1\nmaxTrialNumber: 1\ntuner: {name: Random}\n"
        "trainingService:\n  platform: kubeflow\n  operator: tf-operator\n"
        f"  kubeconfig: {kube_cluster.kubeconfig}\n"
        "  worker: {replicas: 1, command: 'env STEP=30 python3 trial.py', cpuNumber: 1, memorySize: 256mb}\n"
    )
    experiment = Experiment(load_config(tmp_path / "config.yml"), experiment_id(), tmp_path / "work")
    start_run(experiment, store, "dag_kr", "r1", {})
    started = trial_lifecycle.start_trial(experiment, store, "r1", 0)
    name, sid = started.handle["name"], started.record.storage_id
    _until(lambda: kube_controller.job(name) is not None, "the job never appeared")

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(trial_lifecycle.stop_trial(StopperDies(), store, started.handle, sid, "its task was marked failed"))
    assert store.trial(sid).status == TrialStatus.USER_CANCELED
    assert not kube_controller.job(name).stopped  # the gap: closed in the store, running on the cluster

    done = asyncio.run(finish_job_stops(experiment, store, time.time(), grace=0.0))
    assert [d.trial_id for d in done] == [started.spec.trial_id]
    _until(lambda: (job := kube_controller.job(name)) is None or job.stopped, "the job still runs")
    assert store.job_stops(experiment.experiment_id) == {}
    record = store.trial(sid)
    assert (record.status, record.message) == (TrialStatus.USER_CANCELED, "its task was marked failed")
    assert kube_controller.launches(name) == 1
    started.platform.cleanup_sync(experiment.experiment_id)

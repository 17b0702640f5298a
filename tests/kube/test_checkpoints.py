"""Checkpoints on the Kubernetes platforms, through mounted storage, against a real kube-apiserver
(the test controller plays the operator and the kubelet): a TFJob trial whose pod is evicted
mid-run restarts as a job of its own from its last checkpoint and ends with one result per step;
one that exits 1 itself is not restarted; Population Based Training runs two generations of four,
each child starting from its parent's checkpoint fetched onto the share."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import pytest

from tests.helpers.checkpoint_trials import TRIAL, assert_resumed_from_step_3
from tests.helpers.kube.cluster import KubeCluster
from tests.helpers.kube.controller import TestController
from tests.kube.test_platforms import MOUNT, experiment_id
from trialflow.checkpoints.keeper import TrialCheckpoints
from trialflow.config import load_config
from trialflow.config.checkpoints import default_folder
from trialflow.experiment import Experiment, check_runnable
from trialflow.lifecycle import trial_lifecycle
from trialflow.platforms.base import TrialStatus
from trialflow.platforms.kubernetes.manifests import job_name
from trialflow.runs import start_run
from trialflow.trial.wire import PBT_LOAD_KEY

pytestmark = pytest.mark.kube

EXAMPLE = Path(__file__).resolve().parents[2] / "dags" / "experiments" / "digits-pbt"


def _service(share: Path, server: str, command: str) -> str:
    return (
        "trainingService:\n  platform: kubeflow\n  operator: tf-operator\n"
        f"  kubeconfig: {{KUBECONFIG}}\n"
        f"  worker: {{replicas: 1, command: '{command}', cpuNumber: 1, memorySize: 256mb}}\n"
        f"  storage: {{storageType: nfs, server: {server}, path: /exports/ckpt, localMountPoint: '{share}', "
        f"containerMountPoint: '{MOUNT}'}}\n"
    )


def _experiment(tmp_path: Path, store, cluster: KubeCluster, controller: TestController, head: str, command: str):
    share = tmp_path / "share"
    share.mkdir()
    server = f"10.0.{len(controller.storage) % 250}.{int(time.time()) % 250}"
    controller.storage[("nfs", server, "/exports/ckpt")] = share
    text = head + _service(share, server, command).replace("{KUBECONFIG}", str(cluster.kubeconfig))
    (tmp_path / "config.yml").write_text(text)
    config = load_config(tmp_path / "config.yml")
    assert check_runnable(config) == []
    experiment = Experiment(config, experiment_id(), tmp_path / "work")
    start_run(experiment, store, "dag_kc", "r1", {})
    return experiment, share


def _one_trial(tmp_path: Path, store, cluster: KubeCluster, controller: TestController, checkpoints: str, env: str):
    """An experiment of one TRIAL on kubeflow keeping checkpoints, its trial started."""
    head = (
        "searchSpace: {x: {_type: uniform, _value: [0, 1]}}\ntrialCodeDirectory: code\n"
        f"trialConcurrency: 1\nmaxTrialNumber: 1\ntuner: {{name: Random}}\ncheckpoints: {checkpoints}\n"
    )
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "trial.py").write_text(TRIAL)
    experiment, share = _experiment(tmp_path, store, cluster, controller, head, f"env {env} python3 trial.py")
    return experiment, share, trial_lifecycle.start_trial(experiment, store, "r1", 0)


def _wait_for(path: Path, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never written"
        time.sleep(0.05)


def test_checkpoints_need_storage_the_airflow_workers_mount(tmp_path: Path):
    (tmp_path / "config.yml").write_text(
        "searchSpace: {x: {_type: uniform, _value: [0, 1]}}\ntrialCommand: python3 t.py\ntrialConcurrency: 1\n"
        "maxTrialNumber: 1\ntuner: {name: Random}\ncheckpoints: {}\n"
        "trainingService: {platform: kubeflow, operator: tf-operator, "
        "worker: {replicas: 1, command: python3 t.py, cpuNumber: 1, memorySize: 256mb}}\n"
    )
    (problem,) = check_runnable(load_config(tmp_path / "config.yml"))
    assert problem.key_path == ("checkpoints",)
    assert "kubeflow keeps checkpoints through mounted storage" in problem.message
    assert "localMountPoint" in problem.message


def test_an_evicted_trial_restarts_as_a_job_of_its_own_from_its_last_checkpoint(
    tmp_path: Path, store, kube_cluster: KubeCluster, kube_controller: TestController
):
    checkpoints = "{keepLast: 1, keepBest: 0}"
    experiment, share, started = _one_trial(tmp_path, store, kube_cluster, kube_controller, checkpoints, "MODE=pause")
    trial_id = started.spec.trial_id
    _wait_for(share / "trialflow" / experiment.experiment_id / "trials" / trial_id / "paused")
    kube_controller.evict(job_name(trial_id))
    outcome = trial_lifecycle.wait_in_worker(started, store, 120, 0.2)

    assert outcome.status == TrialStatus.SUCCEEDED, (outcome.message, kube_controller.errors)
    assert_resumed_from_step_3(store, started.record.storage_id, "was evicted by its node")
    record = store.trial(started.record.storage_id)
    assert record.handle is not None and record.handle["name"] == job_name(trial_id, 1)
    assert kube_controller.launches(job_name(trial_id)) == 1 and kube_controller.launches(job_name(trial_id, 1)) == 1
    kept = TrialCheckpoints(default_folder(experiment.workdir), experiment.experiment_id, trial_id)
    assert kept.steps() == [6]  # keepLast 1


def test_a_trial_that_exits_1_itself_is_not_restarted(
    tmp_path: Path, store, kube_cluster: KubeCluster, kube_controller: TestController
):
    _, _, started = _one_trial(tmp_path, store, kube_cluster, kube_controller, "{}", "MODE=exit1")
    outcome = trial_lifecycle.wait_in_worker(started, store, 120, 0.2)
    assert outcome.status == TrialStatus.FAILED
    assert store.trial(started.record.storage_id).restarts == ()
    assert "not restarted" in (outcome.message or ""), outcome.message
    assert kube_controller.launches(job_name(started.spec.trial_id, 1)) == 0


def test_population_based_training_of_two_generations_of_four_on_kubeflow(
    tmp_path: Path, store, kube_cluster: KubeCluster, kube_controller: TestController
):
    pytest.importorskip("sklearn")
    head = (
        f"searchSpaceFile: {EXAMPLE / 'search_space.json'}\ntrialCodeDirectory: {EXAMPLE}\n"
        "trialConcurrency: 4\nmaxTrialNumber: 8\n"
        "tuner: {name: PBTTuner, classArgs: {optimize_mode: maximize, population_size: 4}}\n"
    )
    experiment, share = _experiment(tmp_path, store, kube_cluster, kube_controller, head, "python3 train.py")
    root = default_folder(experiment.workdir)
    first = [trial_lifecycle.start_trial(experiment, store, "r1", i) for i in range(4)]
    with pytest.raises(trial_lifecycle.TrialWaits):
        trial_lifecycle.start_trial(experiment, store, "r1", 4)
    for trial in first:
        outcome = trial_lifecycle.wait_in_worker(trial, store, 120, 0.2)
        assert outcome.status == TrialStatus.SUCCEEDED, (outcome.message, kube_controller.errors)
        trial_lifecycle.finish_trial(store, trial.record.storage_id, outcome.status, outcome.message)
    second = [trial_lifecycle.start_trial(experiment, store, "r1", i) for i in range(4, 8)]
    for trial in second:
        outcome = trial_lifecycle.wait_in_worker(trial, store, 120, 0.2)
        assert outcome.status == TrialStatus.SUCCEEDED, (outcome.message, kube_controller.errors)
        trial_lifecycle.finish_trial(store, trial.record.storage_id, outcome.status, outcome.message)
    exploited = 0
    for trial in second:
        record = store.trial(trial.record.storage_id)
        lineage = record.lineage
        assert lineage is not None and lineage.generation == 1 and lineage.loaded_step == 1, lineage
        exploited += lineage.exploited
        # the pod read its parent's model from the share, at the path parameter.cfg gave it
        folder = share / "trialflow" / experiment.experiment_id / "trials" / trial.spec.trial_id
        parameters = json.loads((folder / "parameter.cfg").read_text())["parameters"]
        assert (
            parameters[PBT_LOAD_KEY]
            == f"{MOUNT}/trialflow/{experiment.experiment_id}/trials/{trial.spec.trial_id}/.trialflow-resume/0"
        )
        parent = TrialCheckpoints(root, experiment.experiment_id, lineage.parent_trial_id or "")
        loaded = folder / ".trialflow-resume" / "0" / "model.pkl"
        assert _digest(loaded) == _digest(parent.prefix / "000000001" / "model.pkl")
        assert TrialCheckpoints(root, experiment.experiment_id, trial.spec.trial_id).steps() == [1]
    assert exploited == 1


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()

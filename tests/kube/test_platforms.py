"""The Kubernetes platforms against a real kube-apiserver + etcd, with the test controller playing
the operators and the kubelet (pod logs go through the API server's real proxy path)."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers.following import Recorder, follow
from tests.helpers.kube.cluster import TOKEN, KubeCluster
from tests.helpers.kube.controller import TestController, delete_crd, install_crd
from trialflow.config.platforms import BUILTIN_PLATFORM_CONFIGS
from trialflow.config.registry import get_platform_entry
from trialflow.experiment.follow import TIMEOUT_REASON
from trialflow.platforms.base import TrialSpec, TrialStatus
from trialflow.platforms.event_loop import run_sync
from trialflow.platforms.kubernetes.client import CustomObjects, KubernetesError, KubernetesUnreachable
from trialflow.platforms.kubernetes.informer import INFORMERS, Informer
from trialflow.platforms.kubernetes.manifests import LABEL_EXPERIMENT, experiment_selector, object_name

pytestmark = pytest.mark.kube

ROLE = {"replicas": 1, "cpuNumber": 1, "memorySize": "256mb"}
#: Where the pods see mounted storage. Not NNI's /tmp/mount: the test controller makes the mount
#: point on this host, and an NNI example config names /tmp/mount as its local folder.
MOUNT = f"/tmp/trialflow-test-mount-{os.getpid()}"
TRIAL = """\
import os, sys, time
import trialflow.trial as t
p = t.get_next_parameter()
for i in range(3):
    t.report_intermediate_result(i * p["x"])
    time.sleep(float(os.environ.get("STEP", "0.2")))
if os.environ.get("HOSTNAME", "").endswith(os.environ.get("FAIL_SUFFIX", "no-such-suffix")):
    # FAIL_AFTER: fail once the other replicas reported (they may start later on a busy machine)
    deadline = time.time() + 60
    while os.environ.get("FAIL_AFTER") and not os.path.exists(os.environ["FAIL_AFTER"]) and time.time() < deadline:
        time.sleep(0.05)
    print("replica failing on purpose", flush=True)
    sys.exit(3)
t.report_final_result(p["x"] * 10)
if os.environ.get("FAIL_AFTER"):
    open(os.environ["FAIL_AFTER"], "w").close()
"""


_counter = iter(range(10_000))


def experiment_id() -> str:
    return f"k{int(time.time()) % 100000:05d}{next(_counter):03d}"


def make(cluster: KubeCluster, service: dict[str, Any], tmp_path: Path):
    service = {"kubeconfig": str(cluster.kubeconfig), **service}
    config = BUILTIN_PLATFORM_CONFIGS[service["platform"]].model_validate(service)
    return get_platform_entry(service["platform"]).load().from_config(config, tmp_path / "exp")


def spec_for(
    tmp_path: Path,
    exp: str,
    index: int = 0,
    command: str = "python3 trial.py",
    x: float = 2.0,
    env: dict[str, str] | None = None,
) -> TrialSpec:
    code = tmp_path / "code"
    code.mkdir(parents=True, exist_ok=True)
    (code / "trial.py").write_text(TRIAL)
    return TrialSpec(exp, f"{exp}-{index:04d}", index, index, {"x": x}, command, code, env=env or {})


def run_trial(platform, spec: TrialSpec, **follow_kw: Any):
    """Submit and follow one trial to its end: (handle, outcome, recorder)."""
    handle = platform.submit_sync(spec)
    outcome, recorder = follow(platform, handle, **follow_kw)
    return handle, outcome, recorder


def values(recorder: Recorder) -> tuple[list[Any], list[Any]]:
    periodical = [m.value for m in sorted(recorder.metrics, key=lambda m: m.sequence) if not m.is_final]
    return periodical, [m.value for m in recorder.metrics if m.is_final]


KINDS = {
    "tfjob": {"platform": "kubeflow", "operator": "tf-operator", "worker": {**ROLE, "command": "python3 trial.py"}},
    "pytorchjob": {
        "platform": "kubeflow",
        "operator": "pytorch-operator",
        "master": {**ROLE, "command": "python3 trial.py"},
        "worker": {**ROLE, "replicas": 2, "command": "python3 trial.py"},
    },
    "trainjob": {"platform": "kubeflow-trainer", "runtimeRef": "torch-distributed", "numNodes": 2},
    "adaptdljob": {"platform": "adl", "dockerImage": "petuum/x"},
}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_trial_runs_and_its_metrics_come_from_the_pod_log(
    kind: str, kube_cluster: KubeCluster, kube_controller: TestController, tmp_path: Path
):
    platform = make(kube_cluster, KINDS[kind], tmp_path)
    exp = experiment_id()
    platform.prepare_sync(exp)
    handle, outcome, recorder = run_trial(platform, spec_for(tmp_path, exp))
    assert outcome.status == TrialStatus.SUCCEEDED, (outcome, kube_controller.errors)
    assert values(recorder) == ([0, 2, 4], [20])
    assert TrialStatus.RUNNING in recorder.statuses
    platform.cleanup_sync(exp)


def test_frameworkcontroller_with_nfs_storage(
    kube_cluster: KubeCluster, kube_controller: TestController, tmp_path: Path
):
    share = tmp_path / "nfs-export"
    share.mkdir()
    kube_controller.storage[("nfs", "10.0.0.9", "/exports/nni")] = share
    platform = make(
        kube_cluster,
        {
            "platform": "frameworkcontroller",
            "storage": {
                "storageType": "nfs",
                "server": "10.0.0.9",
                "path": "/exports/nni",
                "localMountPoint": str(share),
                "containerMountPoint": MOUNT,
            },
            "taskRoles": [
                {
                    "name": "worker",
                    "taskNumber": 1,
                    "command": "python3 trial.py",
                    "cpuNumber": 1,
                    "memorySize": "256mb",
                    "frameworkAttemptCompletionPolicy": {"minFailedTaskCount": 1, "minSucceedTaskCount": 1},
                }
            ],
        },
        tmp_path,
    )
    exp = experiment_id()
    platform.prepare_sync(exp)
    handle, outcome, recorder = run_trial(platform, spec_for(tmp_path, exp))
    assert outcome.status == TrialStatus.SUCCEEDED, (outcome, kube_controller.errors)
    assert values(recorder) == ([0, 2, 4], [20])
    pods = CustomObjects(platform.cluster, "default")
    assert run_sync(pods.pods(f"FC_FRAMEWORK_NAME={handle['name']}")) == []  # the controller deleted them
    assert (share / "trialflow" / exp / "trials" / handle["trial_id"] / "parameter.cfg").exists()
    platform.cleanup_sync(exp)
    assert not (share / "trialflow" / exp).exists()


@pytest.mark.parametrize("storage", ["nfs", "pvc", "azureStorage"])
def test_metrics_through_mounted_storage(
    storage: str, kube_cluster: KubeCluster, kube_controller: TestController, tmp_path: Path
):
    share = tmp_path / "share"
    share.mkdir()
    section = {
        "nfs": {"storageType": "nfs", "server": "10.0.0.8", "path": "/x"},
        "pvc": {"storageType": "pvc", "claimName": "nni-claim"},
        "azureStorage": {
            "storageType": "azureStorage",
            "azureAccount": "acct",
            "azureShare": "nni-share",
            "secretName": "azure-key",
        },
    }[storage]
    key = {"nfs": ("nfs", "10.0.0.8", "/x"), "pvc": ("pvc", "nni-claim"), "azureStorage": ("azureFile", "nni-share")}
    kube_controller.storage[key[storage]] = share
    platform = make(
        kube_cluster,
        {**KINDS["tfjob"], "storage": {**section, "localMountPoint": str(share), "containerMountPoint": MOUNT}},
        tmp_path,
    )
    exp = experiment_id()
    platform.prepare_sync(exp)
    handle = platform.submit_sync(spec_for(tmp_path, exp))
    objects = CustomObjects(platform.cluster, "default")
    assert run_sync(objects_config_maps(objects, exp)) == []  # nothing travels in a ConfigMap
    outcome, recorder = follow(platform, handle)
    assert outcome.status == TrialStatus.SUCCEEDED, (outcome, kube_controller.errors)
    assert values(recorder) == ([0, 2, 4], [20])
    logs = list((share / "trialflow" / exp / "trials" / handle["trial_id"] / "logs").glob("*.log"))
    assert [p.name for p in logs] == [f"{handle['name']}-worker-0.log"]
    platform.cleanup_sync(exp)


async def objects_config_maps(objects: CustomObjects, exp: str) -> list[str]:
    core = await objects._core()
    found = await core.list_namespaced_config_map("default", label_selector=experiment_selector(exp))
    return [cm.metadata.name for cm in found.items]


def test_real_nni_trial_code_reports_from_a_pod(
    kube_cluster: KubeCluster, kube_controller: TestController, tmp_path: Path, nni_python: str
):
    code = tmp_path / "code"
    code.mkdir()
    (code / "mnist.py").write_text(
        "import nni\np = nni.get_next_parameter()\nfor i in range(2):\n    nni.report_intermediate_result(i + p['x'])\n"
        "nni.report_final_result({'default': p['x'] * 3, 'loss': 0.5})\n"
    )
    platform = make(kube_cluster, {**KINDS["tfjob"], "worker": {**ROLE, "command": f"{nni_python} mnist.py"}}, tmp_path)
    exp = experiment_id()
    handle = platform.submit_sync(TrialSpec(exp, f"{exp}-0000", 0, 0, {"x": 1.5}, "", code))
    outcome, recorder = follow(platform, handle)
    assert outcome.status == TrialStatus.SUCCEEDED, (outcome, kube_controller.errors)
    assert values(recorder) == ([1.5, 2.5], [{"default": 4.5, "loss": 0.5}])
    platform.cleanup_sync(exp)


def test_one_failing_replica_fails_the_trial_and_stops_the_others(
    kube_cluster: KubeCluster, kube_controller: TestController, tmp_path: Path
):
    platform = make(
        kube_cluster,
        {
            **KINDS["tfjob"],
            "worker": {**ROLE, "replicas": 2, "command": "python3 trial.py"},
            "ps": {**ROLE, "command": "sleep 600"},
        },
        tmp_path,
    )
    exp = experiment_id()
    reported = tmp_path / "worker-0-reported"
    handle = platform.submit_sync(
        spec_for(tmp_path, exp, env={"FAIL_SUFFIX": "-worker-1", "FAIL_AFTER": str(reported)})
    )
    outcome, recorder = follow(platform, handle)
    assert outcome.status == TrialStatus.FAILED
    assert "TFJobFailed" in (outcome.message or "")
    job = kube_controller.job(handle["name"])
    assert job is not None and all(r.proc.poll() is not None for r in job.replicas)  # ps stopped too
    assert values(recorder)[1] == [20]  # worker 0 (the metrics replica) still reported
    platform.cleanup_sync(exp)


@pytest.mark.parametrize("kind", ["tfjob", "framework"])
def test_cancel_stops_the_job_and_reports_why(
    kind: str, kube_cluster: KubeCluster, kube_controller: TestController, tmp_path: Path
):
    share = tmp_path / "share"
    share.mkdir()
    kube_controller.storage[("pvc", "fc-claim")] = share
    service = (
        KINDS["tfjob"]
        if kind == "tfjob"
        else {
            "platform": "frameworkcontroller",
            "storage": {
                "storageType": "pvc",
                "claimName": "fc-claim",
                "containerMountPoint": MOUNT,
                "localMountPoint": str(share),
            },
            "taskRoles": [
                {
                    "name": "w",
                    "command": "python3 trial.py",
                    "cpuNumber": 1,
                    "memorySize": "256mb",
                    "frameworkAttemptCompletionPolicy": {"minFailedTaskCount": 1, "minSucceedTaskCount": 1},
                }
            ],
        }
    )
    platform = make(kube_cluster, service, tmp_path)
    exp = experiment_id()
    handle = platform.submit_sync(spec_for(tmp_path, exp, env={"STEP": "30"}))
    deadline = time.monotonic() + 30
    while kube_controller.job(handle["name"]) is None and time.monotonic() < deadline:
        time.sleep(0.1)
    # a second platform object (another process in real life) cancels; the follower learns why
    make(kube_cluster, service, tmp_path).cancel_sync(handle, TrialStatus.USER_CANCELED, "stopped by the user")
    outcome, _ = follow(make(kube_cluster, service, tmp_path), handle)
    assert (outcome.status, outcome.message) == (TrialStatus.USER_CANCELED, "stopped by the user")
    job = kube_controller.job(handle["name"])
    deadline = time.monotonic() + 10
    while any(r.proc.poll() is None for r in job.replicas) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert all(r.proc.poll() is not None for r in job.replicas)
    remaining = run_sync(CustomObjects(platform.cluster, "default").get(platform.resource, handle["name"]))
    if kind == "tfjob":
        assert remaining is None  # deleted (propagationPolicy Background)
    else:
        assert remaining["spec"]["executionType"] == "Stop"  # a Framework is stopped, its status kept
        assert remaining["status"]["state"] == "Completed"
    platform.cleanup_sync(exp)


def test_max_trial_duration_stops_a_trial_early(
    kube_cluster: KubeCluster, kube_controller: TestController, tmp_path: Path
):
    platform = make(kube_cluster, KINDS["pytorchjob"], tmp_path)
    exp = experiment_id()
    handle = platform.submit_sync(spec_for(tmp_path, exp, env={"STEP": "30"}))
    outcome, _ = follow(platform, handle, deadline=time.time() + 2)
    assert (outcome.status, outcome.message) == (TrialStatus.EARLY_STOPPED, TIMEOUT_REASON)
    assert run_sync(CustomObjects(platform.cluster, "default").get(platform.resource, handle["name"])) is None
    platform.cleanup_sync(exp)


def test_a_second_submit_reattaches_instead_of_starting_again(
    kube_cluster: KubeCluster, kube_controller: TestController, tmp_path: Path
):
    exp = experiment_id()
    spec = spec_for(tmp_path, exp)
    first = make(kube_cluster, KINDS["tfjob"], tmp_path).submit_sync(spec)
    again = make(kube_cluster, KINDS["tfjob"], tmp_path).submit_sync(spec)  # a retried task, a new process
    assert again["uid"] == first["uid"] and again["name"] == object_name(spec.trial_id)
    outcome, recorder = follow(make(kube_cluster, KINDS["tfjob"], tmp_path), again)
    assert outcome.status == TrialStatus.SUCCEEDED and values(recorder)[1] == [20]
    assert kube_controller.launches(first["name"]) == 1
    make(kube_cluster, KINDS["tfjob"], tmp_path).cleanup_sync(exp)


def test_the_watch_relists_after_410_gone(kube_cluster: KubeCluster, kube_controller: TestController, tmp_path: Path):
    platform = make(kube_cluster, KINDS["tfjob"], tmp_path)
    exp = experiment_id()
    first = platform.submit_sync(spec_for(tmp_path, exp, 0))

    async def scenario() -> tuple[int, int, bool]:
        informer: Informer = INFORMERS.get(platform.api, platform.resource, experiment_selector(exp))
        await informer.wait_synced()
        await informer.stop()
        informer.resource_version = "1"  # far older than the server keeps: the next watch gets 410
        informer.start()
        second = await platform.submit(spec_for(tmp_path, exp, 1))
        deadline = time.monotonic() + 30
        while informer.get(second["name"])[0] is None and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        return informer.gone, informer.relists, informer.get(second["name"])[0] is not None

    gone, relists, seen = run_sync(scenario())
    assert gone >= 1 and relists >= 2 and seen
    outcome, _ = follow(platform, first)
    assert outcome.status == TrialStatus.SUCCEEDED
    platform.cleanup_sync(exp)


def test_watch_follows_without_asking_and_poll_asks_every_time(
    kube_cluster: KubeCluster, kube_controller: TestController, tmp_path: Path, monkeypatch
):
    """Following a trial by watch needs no GET of its job; by poll, one per poll. (Counted by
    wrapping the real call: kube-apiserver 1.20 leaves custom-resource GETs out of its metrics.)"""
    reads: list[str] = []
    real_get = CustomObjects.get

    async def counted_get(self, resource, name, **kwargs):
        reads.append(name)
        return await real_get(self, resource, name, **kwargs)

    monkeypatch.setattr(CustomObjects, "get", counted_get)
    gets = {}
    for mode in ("watch", "poll"):
        platform = make(kube_cluster, {**KINDS["tfjob"], "statusUpdates": mode}, tmp_path / mode)
        exp = experiment_id()
        handle = platform.submit_sync(spec_for(tmp_path / mode, exp, env={"STEP": "0.5"}))
        reads.clear()
        outcome, recorder = follow(platform, handle)
        gets[mode] = len(reads)
        assert outcome.status == TrialStatus.SUCCEEDED and values(recorder)[1] == [20]
        platform.cleanup_sync(exp)
    assert gets["poll"] >= 5, gets  # ~1.5 s of trial at poll_interval 0.2
    assert gets["watch"] <= 1, gets  # at most one read before the watch's first list arrives


def test_wrong_kubeconfig_and_credentials_are_clear_errors(kube_cluster: KubeCluster, tmp_path: Path):
    bad_token = tmp_path / "bad-token.yaml"
    bad_token.write_text(yaml.safe_dump(kube_cluster.kubeconfig_dict(token="not-" + TOKEN)))
    with pytest.raises(KubernetesError, match=r"refused the credentials \(401") as err:
        make(kube_cluster, {**KINDS["tfjob"], "kubeconfig": str(bad_token)}, tmp_path).prepare_sync("x")
    assert "not-" + TOKEN not in str(err.value)
    nowhere = tmp_path / "nowhere.yaml"
    config = kube_cluster.kubeconfig_dict()
    config["clusters"][0]["cluster"]["server"] = "https://127.0.0.1:9"
    nowhere.write_text(yaml.safe_dump(config))
    with pytest.raises(KubernetesError, match="cannot reach the API server"):
        make(kube_cluster, {**KINDS["tfjob"], "kubeconfig": str(nowhere)}, tmp_path).prepare_sync("x")
    garbage = tmp_path / "garbage.yaml"
    garbage.write_text("just: [a, list\n")
    with pytest.raises(KubernetesError, match=f"cannot load kubeconfig {garbage}"):
        make(kube_cluster, {**KINDS["tfjob"], "kubeconfig": str(garbage)}, tmp_path).prepare_sync("x")


def test_a_missing_crd_is_a_clear_error(kube_cluster: KubeCluster, kube_controller: TestController, tmp_path: Path):
    platform = make(kube_cluster, KINDS["trainjob"], tmp_path)
    delete_crd(kube_controller.api_client, "TrainJob")
    try:
        with pytest.raises(KubernetesError, match=r"TrainJob CRD \(trainjobs.trainer.kubeflow.org\) is not installed"):
            platform.prepare_sync("x")
        with pytest.raises(KubernetesError, match="is the TrainJob operator"):
            platform.submit_sync(spec_for(tmp_path, experiment_id()))
        # Following a job of a kind the server does not serve is "not now", never "deleted":
        # a restarting kube-apiserver answers so until it has loaded its CRDs.
        with pytest.raises(KubernetesUnreachable, match="does not serve this kind right now"):
            run_sync(CustomObjects(platform.cluster, "default").get(platform.resource, "trialflow-x-0000"))
    finally:
        install_crd(kube_controller.api_client, "TrainJob")


def test_cleanup_deletes_only_the_experiments_objects(
    kube_cluster: KubeCluster, kube_controller: TestController, tmp_path: Path
):
    platform = make(kube_cluster, KINDS["tfjob"], tmp_path)
    mine, other = experiment_id(), experiment_id()
    for exp in (mine, other):
        platform.submit_sync(spec_for(tmp_path, exp, env={"STEP": "30"}))
    platform.cleanup_sync(mine)
    api = CustomObjects(platform.cluster, "default")

    async def names(exp: str) -> tuple[list[str], list[str]]:
        listing = await (await api.custom_api()).list_namespaced_custom_object(
            "kubeflow.org", "v1", "default", "tfjobs", label_selector=f"{LABEL_EXPERIMENT}={exp}"
        )
        return [o["metadata"]["name"] for o in listing["items"]], await objects_config_maps(api, exp)

    assert run_sync(names(mine)) == ([], [])
    jobs, maps = run_sync(names(other))
    assert len(jobs) == 1 and len(maps) == 1
    platform.cleanup_sync(other)
    assert run_sync(names(other)) == ([], [])


def test_a_kubernetes_connection_names_the_cluster(
    kube_cluster: KubeCluster, kube_controller: TestController, tmp_path: Path, monkeypatch
):
    """kubernetesConnId: the cncf-kubernetes provider's connection fields, read via its async hook."""
    from trialflow.hooks import airflow_connections

    monkeypatch.setenv(
        "AIRFLOW_CONN_TEST_K8S",
        json.dumps({"conn_type": "kubernetes", "extra": {"kube_config": kube_cluster.kubeconfig.read_text()}}),
    )
    service = {k: v for k, v in KINDS["tfjob"].items()}
    config = BUILTIN_PLATFORM_CONFIGS["kubeflow"].model_validate({**service, "kubernetesConnId": "test_k8s"})
    with pytest.raises(KubernetesError, match="needs Airflow's cncf-kubernetes provider"):
        get_platform_entry("kubeflow").load().from_config(config, tmp_path).prepare_sync("x")  # outside Airflow
    platform = get_platform_entry("kubeflow").load().from_config(config, tmp_path, airflow_connections())
    exp = experiment_id()
    platform.prepare_sync(exp)
    outcome, recorder = follow(platform, platform.submit_sync(spec_for(tmp_path, exp)))
    assert outcome.status == TrialStatus.SUCCEEDED and values(recorder)[1] == [20]
    assert "test_k8s" in platform.cluster.label
    platform.cleanup_sync(exp)


def test_an_idle_informer_ends_its_watch_and_a_new_ask_relists(
    kube_cluster: KubeCluster, kube_controller: TestController, tmp_path: Path, monkeypatch
):
    from trialflow.platforms.kubernetes import informer as kube_informer

    monkeypatch.setattr(kube_informer, "WATCH_TIMEOUT_SECONDS", 1)
    monkeypatch.setattr(kube_informer, "IDLE_SECONDS", 0.5)
    platform = make(kube_cluster, KINDS["tfjob"], tmp_path)
    exp = experiment_id()

    async def scenario() -> tuple[bool, int, bool]:
        informer = INFORMERS.get(platform.api, platform.resource, experiment_selector(exp))
        await informer.wait_synced()
        deadline = time.monotonic() + 20
        while not informer._task.done() and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        ended = informer._task.done()
        again = INFORMERS.get(platform.api, platform.resource, experiment_selector(exp))
        await again.wait_synced()
        return ended, again.relists, again is informer

    ended, relists, same = run_sync(scenario())
    assert ended and same and relists == 2  # the stream ended while idle; asked again, it listed afresh


def test_adaptdl_code_in_the_image_runs_there(
    kube_cluster: KubeCluster, kube_controller: TestController, tmp_path: Path
):
    """NNI's AdaptDL way: trialCodeDirectory names a folder of the image; only parameters travel."""
    image_code = tmp_path / "image-root-cifar10"
    image_code.mkdir()
    (image_code / "main_adl.py").write_text(TRIAL)
    inside = f"/tmp/trialflow-test-image-{experiment_id()}"
    kube_controller.image_files[inside] = image_code
    try:
        platform = make(kube_cluster, KINDS["adaptdljob"], tmp_path)
        exp = experiment_id()
        spec = TrialSpec(exp, f"{exp}-0000", 0, 0, {"x": 2.0}, "python3 main_adl.py", Path(inside))
        assert platform.code_in_image(spec.code_dir)
        handle = platform.submit_sync(spec)
        outcome, recorder = follow(platform, handle)
        assert outcome.status == TrialStatus.SUCCEEDED, (outcome, kube_controller.errors)
        assert values(recorder) == ([0, 2, 4], [20])
        platform.cleanup_sync(exp)
    finally:
        del kube_controller.image_files[inside]


#: Stands in for the seeds' dist_mnist.py (PyTorch / TensorFlow and a dataset download): reads
#: the NFS export where the seed mounts it, and reports the way the seed's trial does.
DIST_MNIST = """\
import trialflow.trial as t
p = t.get_next_parameter()
data = float(open("/tmp/mount/data.txt").read())
t.report_intermediate_result(data)
t.report_final_result(data * 2)
"""


@pytest.mark.parametrize(
    "seed, kind", [("mnist-distributed-pytorch", "pytorchjobs"), ("mnist-distributed-tfv1", "tfjobs")]
)
def test_the_kubeflow_seeds_nfs_without_a_local_mount(
    seed: str, kind: str, kube_cluster: KubeCluster, kube_controller: TestController, tmp_path: Path, nni_examples
):
    """The Kubeflow mode document's configs, placeholders filled and nothing added: the export is
    mounted into the pods for the trial's data, code and metrics go the ConfigMap way."""
    from trialflow.experiment import load_runnable_config

    share = tmp_path / "export"
    share.mkdir()
    (share / "data.txt").write_text("21")
    kube_controller.storage[("nfs", "10.0.0.7", "/var/nfs/nni")] = share
    folder = tmp_path / "experiment"
    folder.mkdir()
    (folder / "dist_mnist.py").write_text(DIST_MNIST)
    (folder / "search_space.json").write_text((nni_examples / seed / "search_space.json").read_text())
    text = (nni_examples / seed / "config_kubeflow.yml").read_text()
    text = text.replace("{your_nfs_server_ip}", "10.0.0.7").replace("{your_nfs_server_export_path}", "/var/nfs/nni")
    (folder / "config.yml").write_text(text)
    service = load_runnable_config(folder / "config.yml").training_service[0]
    assert service.storage is not None and service.storage.local_mount_point is None
    service = service.model_copy(update={"kubeconfig": str(kube_cluster.kubeconfig)})
    platform = get_platform_entry("kubeflow").load().from_config(service, tmp_path / "exp")
    assert platform.resource.plural == kind
    exp = experiment_id()
    platform.prepare_sync(exp)
    handle, outcome, recorder = run_trial(platform, TrialSpec(exp, f"{exp}-0000", 0, 0, {"x": 1}, "", folder))
    assert outcome.status == TrialStatus.SUCCEEDED, (outcome, kube_controller.errors)
    assert values(recorder) == ([21.0], [42.0])
    platform.cleanup_sync(exp)


def test_a_function_trial_runs_in_every_role_that_has_no_command(
    kube_cluster: KubeCluster, kube_controller: TestController, tmp_path: Path
):
    """Issue 39: ``trialFunction`` with a PyTorchJob whose roles name no command: each replica
    runs the function from the code shipped beside trialflow's SDK (nothing installed in the pod)."""
    from trialflow.config import load_config

    code = tmp_path / "code"
    (code / "models").mkdir(parents=True)
    (code / "models" / "__init__.py").write_text("")
    (code / "models" / "train.py").write_text(
        "import trialflow.trial as t\n\ndef objective(params):\n"
        "    for i in range(2):\n        t.report_intermediate_result(i + params['x'])\n"
        "    return {'default': params['x'] * 10, 'loss': 0.25}\n"
    )
    role = "{replicas: 1, cpuNumber: 1, memorySize: 256mb}"
    (tmp_path / "config.yml").write_text(
        "searchSpace: {x: {_type: uniform, _value: [0, 1]}}\ntrialFunction: models.train:objective\n"
        "trialCodeDirectory: code\ntrialConcurrency: 1\ntuner: {name: Random}\n"
        "trainingService:\n  platform: kubeflow\n  operator: pytorch-operator\n"
        f"  kubeconfig: {kube_cluster.kubeconfig}\n"
        f"  master: {role}\n  worker: {role}\n"
    )
    config = load_config(tmp_path / "config.yml")
    service = config.training_service[0]
    assert service.master.command == service.worker.command == config.function_command
    platform = get_platform_entry("kubeflow").load().from_config(service, tmp_path / "exp")
    exp = experiment_id()
    platform.prepare_sync(exp)
    handle = platform.submit_sync(TrialSpec(exp, f"{exp}-0000", 0, 0, {"x": 1.5}, config.function_command, code))
    outcome, recorder = follow(platform, handle)
    assert outcome.status == TrialStatus.SUCCEEDED, (outcome, kube_controller.errors)
    assert values(recorder) == ([1.5, 2.5], [{"default": 15.0, "loss": 0.25}])
    platform.cleanup_sync(exp)

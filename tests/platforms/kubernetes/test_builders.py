"""The Kubernetes platforms' pure parts: names, status tables, manifests, storage, log cursors.
No cluster needed; what these build is what the cluster tests then send for real."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from trialflow.config.platforms import (
    AdaptdlConfig,
    FrameworkControllerConfig,
    KubeflowConfig,
    KubeflowTrainerConfig,
    KubernetesStorageConfig,
)
from trialflow.platforms.base import TrialSpec, TrialStatus
from trialflow.platforms.kubernetes import storage as kube_storage
from trialflow.platforms.kubernetes.adaptdl import AdaptdlPlatform, adaptdl_status
from trialflow.platforms.kubernetes.frameworkcontroller import FrameworkControllerPlatform, framework_status
from trialflow.platforms.kubernetes.kubeflow import KubeflowPlatform, kubeflow_status
from trialflow.platforms.kubernetes.logs import new_log_lines, since_time
from trialflow.platforms.kubernetes.manifests import NAME_LIMIT, object_name, resources
from trialflow.platforms.kubernetes.trainer import KubeflowTrainerPlatform, trainjob_status

ROLE = {"replicas": 1, "command": "python3 t.py", "cpuNumber": 2, "memorySize": "1gb"}


def spec(tmp_path: Path, trial_id: str = "eabc1234-0007", **kw) -> TrialSpec:
    code = tmp_path / "code"
    code.mkdir(exist_ok=True)
    (code / "t.py").write_text("print('hi')\n")
    return TrialSpec("eabc1234", trial_id, 7, 7, {"x": 0.5}, kw.pop("command", "python3 t.py"), code, **kw)


def job_of(platform, s: TrialSpec) -> dict:
    return platform.objects(s)[-1]


# -- names -------------------------------------------------------------------------------------


@pytest.mark.parametrize("trial_id", ["eabc1234-0007", "EXP_Upper.Case-1", "a" * 200, "x--y__z", "9starts-with-digit"])
def test_object_names_are_dns_labels_within_63_characters(trial_id: str):
    name = object_name(trial_id)
    assert len(name) <= NAME_LIMIT and name == name.lower()
    assert name[0].isalpha() and name[-1].isalnum()
    assert all(ch.isalnum() or ch == "-" for ch in name)
    assert object_name(trial_id) == name  # deterministic: a retry finds its job


def test_long_names_stay_distinct():
    a, b = object_name("a" * 100 + "1"), object_name("a" * 100 + "2")
    assert a != b and len(a) == len(b) == NAME_LIMIT


def test_resources_set_requests_equal_to_limits_and_gpus():
    assert resources(1.5, 2048, 2) == {
        "requests": {"cpu": "1.5", "memory": "2048Mi", "nvidia.com/gpu": 2},
        "limits": {"cpu": "1.5", "memory": "2048Mi", "nvidia.com/gpu": 2},
    }
    assert resources(None, None, 0) == {}


# -- status tables -----------------------------------------------------------------------------


def cond(*pairs: tuple[str, str]) -> dict:
    return {
        "status": {"conditions": [{"type": t, "status": s, "reason": f"R{t}", "message": f"m {t}"} for t, s in pairs]}
    }


@pytest.mark.parametrize(
    "obj, expected",
    [
        ({}, TrialStatus.WAITING),
        (cond(("Created", "True")), TrialStatus.WAITING),
        (cond(("Created", "True"), ("Running", "True")), TrialStatus.RUNNING),
        (cond(("Created", "True"), ("Running", "True"), ("Restarting", "True")), TrialStatus.RUNNING),
        (cond(("Created", "True"), ("Running", "False"), ("Succeeded", "True")), TrialStatus.SUCCEEDED),
        (cond(("Created", "True"), ("Running", "False"), ("Failed", "True")), TrialStatus.FAILED),
        # the last condition is not the state: Succeeded is True although Running came after it
        (cond(("Succeeded", "True"), ("Running", "False")), TrialStatus.SUCCEEDED),
        (cond(("Running", "True"), ("Succeeded", "False")), TrialStatus.RUNNING),
        (cond(("Suspended", "True")), TrialStatus.WAITING),
    ],
)
def test_kubeflow_status_reads_the_true_condition(obj: dict, expected: TrialStatus):
    assert kubeflow_status(obj)[0] == expected


def test_kubeflow_failure_carries_the_operators_message():
    status, message = kubeflow_status(cond(("Running", "False"), ("Failed", "True")))
    assert status == TrialStatus.FAILED and message == "RFailed m Failed"


@pytest.mark.parametrize(
    "obj, expected",
    [
        ({}, TrialStatus.WAITING),
        ({"status": {"jobsStatus": [{"name": "node", "active": 0, "ready": 0}]}}, TrialStatus.WAITING),
        ({"status": {"jobsStatus": [{"name": "node", "active": 2}]}}, TrialStatus.RUNNING),
        (cond(("Suspended", "True")), TrialStatus.WAITING),
        (cond(("Complete", "True")), TrialStatus.SUCCEEDED),
        (cond(("Failed", "True")), TrialStatus.FAILED),
        (cond(("Complete", "False"), ("Failed", "True")), TrialStatus.FAILED),
    ],
)
def test_trainjob_status(obj: dict, expected: TrialStatus):
    assert trainjob_status(obj)[0] == expected


@pytest.mark.parametrize(
    "state, expected",
    [
        (None, TrialStatus.WAITING),
        ("AttemptCreationPending", TrialStatus.WAITING),
        ("AttemptCreationRequested", TrialStatus.WAITING),
        ("AttemptPreparing", TrialStatus.WAITING),
        ("AttemptRunning", TrialStatus.RUNNING),
        ("AttemptDeletionPending", TrialStatus.RUNNING),
        ("AttemptDeletionRequested", TrialStatus.RUNNING),
        ("AttemptDeleting", TrialStatus.RUNNING),
        ("AttemptCompleted", TrialStatus.RUNNING),
    ],
)
def test_framework_states_before_completion(state, expected):
    assert framework_status({"status": {"state": state}} if state else {})[0] == expected


@pytest.mark.parametrize(
    "kind, expected", [("Succeeded", TrialStatus.SUCCEEDED), ("Failed", TrialStatus.FAILED), (None, TrialStatus.FAILED)]
)
def test_framework_completion_is_read_from_completion_status(kind, expected):
    completion = {"code": 1, "phrase": "ContainerFailed", "diagnostics": "exit 1"}
    if kind:
        completion["type"] = {"name": kind}
    status, message = framework_status(
        {"status": {"state": "Completed", "attemptStatus": {"completionStatus": completion}}}
    )
    assert status == expected
    assert (message == "ContainerFailed exit 1") == (expected == TrialStatus.FAILED)


@pytest.mark.parametrize(
    "phase, expected",
    [
        (None, TrialStatus.WAITING),
        ("Pending", TrialStatus.WAITING),
        ("Starting", TrialStatus.WAITING),
        ("Running", TrialStatus.RUNNING),
        ("Stopping", TrialStatus.RUNNING),
        ("Succeeded", TrialStatus.SUCCEEDED),
        ("Failed", TrialStatus.FAILED),
        ("SomethingNew", TrialStatus.WAITING),
    ],
)
def test_adaptdl_phases(phase, expected):
    assert adaptdl_status({"status": {"phase": phase, "reason": "PodFailure"}} if phase else {})[0] == expected


# -- manifests ---------------------------------------------------------------------------------


def test_tfjob_roles_resources_gpus_and_labels(tmp_path: Path):
    config = KubeflowConfig.model_validate(
        {
            "platform": "kubeflow",
            "operator": "tf-operator",
            "apiVersion": "v1alpha2",
            "namespace": "ml",
            "worker": {**ROLE, "replicas": 2, "gpuNumber": 1},
            "ps": {**ROLE, "command": "python3 ps.py"},
        }
    )
    job = job_of(KubeflowPlatform(config, tmp_path), spec(tmp_path))
    assert job["apiVersion"] == "kubeflow.org/v1" and job["kind"] == "TFJob"  # old apiVersion mapped
    assert job["metadata"]["name"] == "trialflow-eabc1234-0007" and job["metadata"]["namespace"] == "ml"
    assert job["metadata"]["labels"]["trialflow.io/experiment"] == "eabc1234"
    assert job["metadata"]["labels"]["trialflow.io/trial"] == "eabc1234-0007"
    specs = job["spec"]["tfReplicaSpecs"]
    assert set(specs) == {"Worker", "PS"} and specs["Worker"]["replicas"] == 2
    worker = specs["Worker"]["template"]["spec"]["containers"][0]
    assert worker["name"] == "tensorflow" and worker["image"] == "msranni/nni:latest"
    assert worker["resources"]["limits"] == {"cpu": "2", "memory": "1024Mi", "nvidia.com/gpu": 1}
    assert "nvidia.com/gpu" not in specs["PS"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert "python3 ps.py" in specs["PS"]["template"]["spec"]["containers"][0]["command"][2]
    env = {e["name"]: e["value"] for e in worker["env"]}
    assert env["NNI_PLATFORM"] == "kubeflow" and env["NNI_TRIAL_JOB_ID"] == "eabc1234-0007"
    assert "CUDA_VISIBLE_DEVICES" not in env  # the device plugin decides
    assert specs["Worker"]["template"]["metadata"]["labels"]["trialflow.io/trial"] == "eabc1234-0007"
    assert job["spec"]["runPolicy"]["cleanPodPolicy"] == "None"
    platform = KubeflowPlatform(config, tmp_path)
    assert platform.metrics_pod_selector("n").endswith("replica-type=worker,training.kubeflow.org/replica-index=0")


def test_pytorchjob_master_first_and_registry_secret(tmp_path: Path):
    auth = tmp_path / "config.json"
    auth.write_text(json.dumps({"auths": {"registry.example": {"auth": "c2VjcmV0"}}}))
    config = KubeflowConfig.model_validate(
        {
            "platform": "kubeflow",
            "operator": "pytorch-operator",
            "master": {**ROLE, "privateRegistryAuthPath": str(auth)},
            "worker": ROLE,
        }
    )
    platform = KubeflowPlatform(config, tmp_path)
    objects = platform.objects(spec(tmp_path))
    kinds = [o["kind"] for o in objects]
    assert kinds == ["Secret", "ConfigMap", "PyTorchJob"]
    secret = objects[0]
    assert secret["type"] == "kubernetes.io/dockerconfigjson"
    assert base64.b64decode(secret["data"][".dockerconfigjson"]) == auth.read_bytes()
    master = objects[-1]["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    assert master["imagePullSecrets"] == [{"name": secret["metadata"]["name"]}]
    assert master["containers"][0]["name"] == "pytorch"
    assert "replica-type=master" in platform.metrics_pod_selector("n")
    rendered = platform.render(spec(tmp_path))
    assert "c2VjcmV0" not in json.dumps(rendered)  # the secret's value never leaves in render


def test_kubeflow_roles_must_fit_the_operator():
    with pytest.raises(ValueError, match="not master"):
        KubeflowConfig.model_validate({"platform": "kubeflow", "operator": "tf-operator", "master": ROLE})
    with pytest.raises(ValueError, match="apiVersion|api_version|literal"):
        KubeflowConfig.model_validate(
            {"platform": "kubeflow", "operator": "tf-operator", "apiVersion": "v9", "worker": ROLE}
        )


def test_trainjob_runtime_ref_command_and_overrides(tmp_path: Path):
    config = KubeflowTrainerConfig.model_validate(
        {
            "platform": "kubeflow-trainer",
            "runtimeRef": "torch-distributed",
            "numNodes": 3,
            "cpuNumber": 1,
            "memorySize": "512mb",
            "dockerImage": "pytorch/pytorch:2",
        }
    )
    job = job_of(KubeflowTrainerPlatform(config, tmp_path), spec(tmp_path, gpu_number=2))
    assert job["apiVersion"] == "trainer.kubeflow.org/v1alpha1" and job["kind"] == "TrainJob"
    assert job["spec"]["runtimeRef"] == {
        "name": "torch-distributed",
        "apiGroup": "trainer.kubeflow.org",
        "kind": "ClusterTrainingRuntime",
    }
    trainer = job["spec"]["trainer"]
    assert trainer["numNodes"] == 3 and trainer["image"] == "pytorch/pytorch:2"
    assert trainer["resourcesPerNode"]["limits"]["nvidia.com/gpu"] == 2
    assert trainer["command"][:2] == ["sh", "-c"] and "python3 t.py" in trainer["command"][2]
    (override,) = job["spec"]["podTemplateOverrides"]
    assert override["targetJobs"] == [{"name": "node"}]
    assert {v["name"] for v in override["spec"]["volumes"]} == {"trialflow-work", "trialflow-files"}
    assert override["metadata"]["labels"]["trialflow.io/trial"] == "eabc1234-0007"


def test_framework_task_roles_and_v1_completion_policy(tmp_path: Path):
    from trialflow.config.v1 import convert_v1

    v1 = {
        "trainingServicePlatform": "frameworkcontroller",
        "trialConcurrency": 1,
        "searchSpace": {},
        "trial": {
            "codeDir": ".",
            "taskRoles": [
                {
                    "name": "worker",
                    "taskNum": 2,
                    "command": "python3 t.py",
                    "gpuNum": 1,
                    "cpuNum": 1,
                    "memoryMB": 2048,
                    "image": "img",
                    "frameworkAttemptCompletionPolicy": {"minFailedTaskCount": 1, "minSucceededTaskCount": 2},
                }
            ],
        },
        "frameworkcontrollerConfig": {"storage": "nfs", "nfs": {"server": "10.0.0.1", "path": "/nni"}},
    }
    service = convert_v1(v1)[0]["trainingService"]
    service["storage"]["localMountPoint"] = str(tmp_path)
    config = FrameworkControllerConfig.model_validate(service)
    platform = FrameworkControllerPlatform(config, tmp_path)
    job = job_of(platform, spec(tmp_path))
    assert job["apiVersion"] == "frameworkcontroller.microsoft.com/v1" and job["spec"]["executionType"] == "Start"
    (role,) = job["spec"]["taskRoles"]
    assert role["taskNumber"] == 2
    assert role["frameworkAttemptCompletionPolicy"] == {"minFailedTaskCount": 1, "minSucceededTaskCount": 2}
    pod = role["task"]["pod"]["spec"]
    assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert {"name": "nni-vol", "nfs": {"server": "10.0.0.1", "path": "/nni"}} in pod["volumes"]
    assert platform.stop_patch == {"spec": {"executionType": "Stop"}} and not platform.cancel_by_delete
    assert "FC_TASKROLE_NAME=worker,FC_TASK_INDEX=0" in platform.metrics_pod_selector("n")


def test_framework_config_path_template_keeps_its_pod_and_gains_ours(tmp_path: Path, nni_examples: Path):
    template = nni_examples / "mnist-pytorch" / "fc_template.yml"
    config = FrameworkControllerConfig.model_validate(
        {
            "platform": "frameworkcontroller",
            "configPath": str(template),
            "storage": {"storageType": "pvc", "localMountPoint": str(tmp_path)},
        }
    )
    job = job_of(FrameworkControllerPlatform(config, tmp_path), spec(tmp_path))
    (role,) = job["spec"]["taskRoles"]
    pod = role["task"]["pod"]["spec"]
    assert pod["initContainers"][0]["name"] == "frameworkbarrier"  # the template's own parts stay
    assert {"name": "data-volume", "persistentVolumeClaim": {"claimName": "nni-storage"}} in pod["volumes"]
    main = pod["containers"][0]
    assert "python mnist.py" in main["command"][2]  # the template's command, run by our script
    paths = [m["mountPath"] for m in main["volumeMounts"]]
    assert set(paths) >= {"/mnt/frameworkbarrier", "/tmp/trialflow/work", "/tmp/mount"}
    assert len(paths) == len(set(paths))  # the template's claim at /tmp/mount, not a second mount there
    assert "nni-vol" not in {v["name"] for v in pod["volumes"]}
    assert role["task"]["pod"]["metadata"]["labels"]["trialflow.io/trial"] == "eabc1234-0007"


def test_adaptdl_adaptive_checkpoint_and_data_nfs(tmp_path: Path):
    config = AdaptdlConfig.model_validate(
        {
            "platform": "adl",
            "dockerImage": "petuum/x",
            "trialCommand": "python3 t.py",
            "adaptive": False,
            "checkpoint": {"storageClass": "hostpath", "storageSize": "1Gi"},
            "nfs": {"server": "10.0.0.2", "path": "/data", "containerMountPath": "/data"},
            "imagePullSecrets": [{"name": "regcred"}],
            "cpuNumber": 1,
            "memorySize": "1gb",
        }
    )
    platform = AdaptdlPlatform(config, tmp_path)
    objects = platform.objects(spec(tmp_path))
    assert [o["kind"] for o in objects] == ["PersistentVolumeClaim", "ConfigMap", "AdaptDLJob"]
    claim, job = objects[0], objects[-1]
    assert claim["spec"]["storageClassName"] == "hostpath"
    assert job["spec"]["maxReplicas"] == 1 and job["spec"]["preemptible"] is False
    pod = job["spec"]["template"]["spec"]
    mounts = {m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    assert {"/adaptdl/checkpoint", "/data"} <= mounts
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert platform.storage is None  # nfs without localMountPoint is data only
    adaptive = AdaptdlConfig.model_validate(
        {"platform": "adl", "dockerImage": "x", "trialCommand": "c", "adaptive": True}
    )
    job = job_of(AdaptdlPlatform(adaptive, tmp_path), spec(tmp_path))
    assert "maxReplicas" not in job["spec"] and job["spec"]["preemptible"] is True


def test_adaptdl_nfs_with_a_local_mount_is_the_trial_storage(tmp_path: Path):
    config = AdaptdlConfig.model_validate(
        {
            "platform": "adl",
            "dockerImage": "x",
            "trialCommand": "c",
            "nfs": {"server": "s", "path": "/p", "containerMountPath": "/nfs", "localMountPoint": str(tmp_path)},
        }
    )
    storage = AdaptdlPlatform(config, tmp_path).storage
    assert storage is not None and storage.container_mount_point == "/nfs"


# -- storage -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "storage, volume",
    [
        ({"storageType": "nfs", "server": "10.1.1.1", "path": "/x"}, {"nfs": {"server": "10.1.1.1", "path": "/x"}}),
        (
            {"storageType": "azureStorage", "azureAccount": "acc", "azureShare": "share", "secretName": "az"},
            {"azureFile": {"secretName": "az", "shareName": "share", "readOnly": False}},
        ),
        ({"storageType": "pvc", "claimName": "claim"}, {"persistentVolumeClaim": {"claimName": "claim"}}),
    ],
)
def test_storage_volumes_and_script(storage: dict, volume: dict):
    config = KubernetesStorageConfig.model_validate(storage)
    assert {"name": "nni-vol", **volume} in kube_storage.volumes(config, "cm")
    assert {"name": "nni-vol", "mountPath": "/tmp/mount"} in kube_storage.volume_mounts(config)
    paths = kube_storage.trial_paths(config, "e1", "e1-0001")
    assert paths.sys_dir == "/tmp/mount/trialflow/e1/trials/e1-0001"
    script = kube_storage.start_script(config, paths, "python3 t.py --a 'b c'")
    assert "cp -R /tmp/mount/trialflow/e1/code /tmp/trialflow/work/code" in script
    assert 'tee -a /tmp/mount/trialflow/e1/trials/e1-0001/logs/"$HOSTNAME".log' in script
    assert "sh -c 'python3 t.py --a '\"'\"'b c'\"'\"''" in script


def test_config_map_script_runs_in_a_shell_and_keeps_the_exit_code(tmp_path: Path):
    """The start scripts are real sh: run both against local folders standing in for the mounts."""
    for storage in (
        None,
        KubernetesStorageConfig(storage_type="pvc", claim_name="c", container_mount_point=str(tmp_path / "mnt")),
    ):
        paths = kube_storage.trial_paths(storage, "e1", "e1-0001")
        script = kube_storage.start_script(storage, paths, "exit 7")
        if storage is None:
            continue  # needs the ConfigMap mount; run for real by the cluster tests
        (tmp_path / "mnt" / "trialflow" / "e1" / "code").mkdir(parents=True)
        (tmp_path / "mnt" / "trialflow" / "e1" / "sdk").mkdir(parents=True)
        script = script.replace(kube_storage.WORK_DIR, str(tmp_path / "work"))
        done = subprocess.run(
            ["sh", "-c", script], env={"HOSTNAME": "pod-0", "PATH": "/usr/bin:/bin"}, capture_output=True, timeout=30
        )
        assert done.returncode == 7
        assert (tmp_path / "mnt" / "trialflow" / "e1" / "trials" / "e1-0001" / "logs" / "pod-0.log").exists()


def test_storage_needs_its_parts_and_a_local_mount(tmp_path: Path):
    with pytest.raises(ValueError, match="needs server"):
        KubernetesStorageConfig.model_validate({"storageType": "nfs", "path": "/x"})
    nfs = KubernetesStorageConfig.model_validate({"storageType": "nfs", "server": "s", "path": "/x"})
    with pytest.raises(kube_storage.StorageError, match="localMountPoint: mount the NFS export s:/x"):
        kube_storage.check_storage(nfs)
    azure = KubernetesStorageConfig.model_validate(
        {
            "storageType": "azureStorage",
            "azureAccount": "a",
            "azureShare": "s",
            "keyVaultName": "v",
            "keyVaultKey": "k",
            "localMountPoint": str(tmp_path),
        }
    )
    with pytest.raises(kube_storage.StorageError, match="secretName.*--vault-name v --name k"):
        kube_storage.check_storage(azure)


def test_code_too_big_for_a_config_map_is_a_clear_error(tmp_path: Path):
    import os

    from trialflow.trial.packing import pack

    code = tmp_path / "code"
    code.mkdir()
    (code / "weights.bin").write_bytes(os.urandom(2 * 1024 * 1024))
    with pytest.raises(kube_storage.StorageError, match="ConfigMap holds at most 1 MiB.*nniignore.*storage"):
        kube_storage.config_map("n", {}, pack(code), "{}")


def test_stage_code_copies_once_honouring_nniignore(tmp_path: Path):
    code = tmp_path / "code"
    (code / "data").mkdir(parents=True)
    (code / "t.py").write_text("x")
    (code / "data" / "big.bin").write_text("y")
    (code / ".nniignore").write_text("data/\n")
    storage = KubernetesStorageConfig(storage_type="pvc", claim_name="c", local_mount_point=tmp_path / "mnt")
    (tmp_path / "mnt").mkdir()
    root = kube_storage.stage_code(storage, "e1", code)
    assert (root / "code" / "t.py").read_text() == "x" and not (root / "code" / "data").exists()
    assert (root / "sdk" / "trialflow" / "trial" / "wire.py").exists()
    (code / "t.py").write_text("changed")
    kube_storage.stage_code(storage, "e1", code)  # once per experiment
    assert (root / "code" / "t.py").read_text() == "x"


# -- incremental logs --------------------------------------------------------------------------


def test_log_cursor_skips_what_was_read_and_waits_for_whole_lines():
    first = (
        "2026-01-01T10:00:00.100000000Z a\n2026-01-01T10:00:00.200000000Z b\n"
        "2026-01-01T10:00:00.200000000Z c\n2026-01-01T10:00:01.5Z partial"
    )
    lines, ts, n = new_log_lines(first, None, 0)
    assert lines == ["a", "b", "c"] and ts == "2026-01-01T10:00:00.200000000Z" and n == 2
    assert since_time(ts) == "2026-01-01T10:00:00Z"
    # the next read repeats the whole second (sinceTime has second precision)
    second = first + " line\n2026-01-01T10:00:01.600000000Z d\n"
    lines, ts, n = new_log_lines(second, ts, n)
    assert lines == ["partial line", "d"] and n == 1
    assert new_log_lines(second, ts, n)[0] == []


def test_log_cursor_keeps_lines_that_share_a_timestamp():
    text = "".join(f"2026-01-01T10:00:00.5Z l{i}\n" for i in range(3))
    lines, ts, n = new_log_lines(text[: text.index("l2") - 22], None, 0)
    assert lines == ["l0", "l1"]
    lines, ts, n = new_log_lines(text, ts, n)
    assert lines == ["l2"] and n == 3


# -- render ------------------------------------------------------------------------------------


def test_render_prints_multi_document_yaml_as_sent(tmp_path: Path):
    (tmp_path / "t.py").write_text("print(1)\n")
    (tmp_path / "config.yml").write_text(
        "searchSpace: {x: {_type: uniform, _value: [0, 1]}}\ntrialConcurrency: 1\nmaxTrialNumber: 1\n"
        "tuner: {name: Random}\ntrialCodeDirectory: .\n"
        "trainingService: {platform: kubeflow, operator: tf-operator, namespace: team,\n"
        "  worker: {replicas: 1, command: python3 t.py, cpuNumber: 1, memorySize: 1gb}}\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "trialflow.cli", "render", str(tmp_path / "config.yml")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    docs = list(yaml.safe_load_all(done.stdout))
    assert [d["kind"] for d in docs] == ["ConfigMap", "TFJob"]
    assert all(d["metadata"]["namespace"] == "team" for d in docs)
    cm = docs[0]
    import re

    header_x = float(re.search(r"^#\s+x: (\S+)$", done.stdout, re.M).group(1))
    assert json.loads(cm["data"]["parameter.cfg"])["parameters"]["x"] == pytest.approx(header_x)
    assert base64.b64decode(cm["binaryData"]["code.tar.gz"])[:2] == b"\x1f\x8b"  # the real archive


@pytest.mark.parametrize("seed", ["mnist-pytorch/config_kubeflow.yml", "mnist-tfv1/config_kubeflow.yml"])
def test_nni_kubeflow_seed_without_a_local_mount_mounts_the_export_for_data(nni_examples: Path, seed: str):
    """The seeds name only the NFS server and path (NNI mounted it with sudo): trialflow still
    mounts the export into the pods, and code and parameters travel in the ConfigMap."""
    done = subprocess.run(
        [sys.executable, "-m", "trialflow.cli", "render", str(nni_examples / seed)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    docs = list(yaml.safe_load_all(done.stdout))
    assert [d["kind"] for d in docs] == ["ConfigMap", "TFJob"]
    assert "parameter.cfg" in docs[0]["data"] and "code.tar.gz" in docs[0]["binaryData"]
    (replica,) = docs[1]["spec"]["tfReplicaSpecs"].values()
    pod = replica["template"]["spec"]
    assert {"name": "nni-vol", "nfs": {"server": "10.10.10.10", "path": "/var/nfs/general"}} in pod["volumes"]
    assert {"name": "nni-vol", "mountPath": "/tmp/mount"} in pod["containers"][0]["volumeMounts"]
    assert any(v.get("configMap") for v in pod["volumes"])


def test_frameworkcontroller_without_storage_is_refused_before_it_starts(tmp_path: Path):
    from trialflow.config.errors import ConfigError
    from trialflow.experiment import load_runnable_config

    (tmp_path / "t.py").write_text("print(1)\n")
    (tmp_path / "config.yml").write_text(
        "searchSpace: {x: {_type: uniform, _value: [0, 1]}}\ntrialConcurrency: 1\ntuner: {name: Random}\n"
        "trainingService: {platform: frameworkcontroller, taskRoles: [{name: w, command: python3 t.py,\n"
        "  cpuNumber: 1, memorySize: 1gb, frameworkAttemptCompletionPolicy: {minFailedTaskCount: 1,\n"
        "  minSucceedTaskCount: 1}}]}\n"
    )
    with pytest.raises(ConfigError, match=r"config.yml: trainingService.storage: FrameworkController deletes"):
        load_runnable_config(tmp_path / "config.yml")


def test_a_pvc_needs_its_claim_unless_a_template_mounts_it():
    with pytest.raises(ValueError, match="storageType pvc needs claimName"):
        KubeflowConfig.model_validate(
            {
                "platform": "kubeflow",
                "operator": "tf-operator",
                "worker": ROLE,
                "storage": {"storageType": "pvc", "localMountPoint": "/tmp"},
            }
        )


def test_adaptdl_code_in_the_image_ships_only_parameters(tmp_path: Path, nni_examples: Path):
    """NNI's cifar10 AdaptDL example (codeDir /cifar10, in the image), its placeholders filled in."""
    from trialflow.cli.render import render_trial
    from trialflow.experiment import load_runnable_config

    text = (nni_examples / "cifar10_pytorch" / "config_adl.yml").read_text()
    text = text.replace("{replace_with_your_ip}", "10.0.0.1")
    (tmp_path / "config_adl.yml").write_text(text)
    (tmp_path / "search_space_adl.json").write_text(
        (nni_examples / "cifar10_pytorch" / "search_space_adl.json").read_text()
    )
    load_runnable_config(tmp_path / "config_adl.yml")  # runnable: nothing to ship from here
    objects = render_trial(tmp_path / "config_adl.yml")["submission"]["objects"]
    assert [o["kind"] for o in objects] == ["PersistentVolumeClaim", "ConfigMap", "AdaptDLJob"]
    assert "code.tar.gz" not in objects[1]["binaryData"] and "sdk.tar.gz" in objects[1]["binaryData"]
    container = objects[-1]["spec"]["template"]["spec"]["containers"][0]
    script = container["command"][2]
    assert "cd /cifar10\n" in script and "code.tar.gz" not in script
    assert {"name": "NNI_CODE_DIR", "value": "/cifar10"} in container["env"]
    assert container["image"] == "petuum/nni:cifar-example"
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert objects[-1]["spec"]["preemptible"] is True and "maxReplicas" not in objects[-1]["spec"]


def test_a_missing_registry_auth_file_is_refused_by_validate(tmp_path: Path):
    from trialflow.config.errors import ConfigError
    from trialflow.experiment import load_runnable_config

    (tmp_path / "t.py").write_text("print(1)\n")
    (tmp_path / "config.yml").write_text(
        "searchSpace: {x: {_type: uniform, _value: [0, 1]}}\ntrialConcurrency: 1\ntuner: {name: Random}\n"
        "trainingService: {platform: kubeflow, operator: tf-operator, worker: {command: python3 t.py,\n"
        "  cpuNumber: 1, memorySize: 1gb, privateRegistryAuthPath: no-such-config.json}}\n"
    )
    with pytest.raises(
        ConfigError,
        match=r"config.yml: trainingService: privateRegistryAuthPath .*"
        r"no-such-config.json: No such file",
    ):
        load_runnable_config(tmp_path / "config.yml")


@pytest.mark.parametrize(
    ("status", "comes_back"),
    [(503, True), (429, True), (502, True), (504, True), (403, False), (422, False), (500, False)],
)
def test_an_api_server_that_cannot_serve_yet_is_unreachable_not_broken(status, comes_back):
    """A restarting kube-apiserver answers 503 "server is starting" for a moment (measured in
    the cluster fault test): the follower must keep trying, as for a refused connection."""
    import asyncio

    from kubernetes_asyncio.client.exceptions import ApiException

    from trialflow.platforms.kubernetes.client import Cluster, CustomObjects, KubernetesError, KubernetesUnreachable

    async def call():
        raise ApiException(status=status, reason="Service Unavailable")

    client = CustomObjects(Cluster(kubeconfig="/nowhere"), "default")
    with pytest.raises(KubernetesError) as raised:
        asyncio.run(client._request("reading PyTorchJob trialflow-e-0000", call))
    assert isinstance(raised.value, KubernetesUnreachable) is comes_back
    assert "reading PyTorchJob trialflow-e-0000" in str(raised.value)


@pytest.mark.parametrize(
    ("body", "missing"),
    [
        # the object is gone: kube-apiserver's Status names it
        (
            '{"kind":"Status","apiVersion":"v1","status":"Failure","message":"pytorchjobs.kubeflow.org '
            '\\"trialflow-e-0000\\" not found","reason":"NotFound","details":{"name":"trialflow-e-0000",'
            '"group":"kubeflow.org","kind":"pytorchjobs"},"code":404}',
            True,
        ),
        # the kind is not served (a restarting server before its CRDs load, or a removed CRD)
        (
            '{"kind":"Status","apiVersion":"v1","status":"Failure","message":"the server could not find the '
            'requested resource","reason":"NotFound","details":{},"code":404}',
            False,
        ),
        ("404 page not found", False),  # what kube-apiserver answers for a kind it does not serve
        (None, False),
    ],
)
def test_a_404_for_the_route_is_not_a_deleted_object(body, missing):
    import asyncio

    from kubernetes_asyncio.client.exceptions import ApiException

    from trialflow.platforms.kubernetes.client import Cluster, CustomObjects, KubernetesUnreachable, object_missing

    exc = ApiException(status=404, reason="Not Found")
    exc.body = body
    assert object_missing(exc) is missing

    async def call():
        raise exc

    client = CustomObjects(Cluster(kubeconfig="/nowhere"), "default")
    if missing:
        assert asyncio.run(client._request("reading PyTorchJob trialflow-e-0000", call, gone=None, named=True)) is None
    else:
        with pytest.raises(KubernetesUnreachable, match="does not serve this kind right now"):
            asyncio.run(client._request("reading PyTorchJob trialflow-e-0000", call, gone=None, named=True))
    # a listing or a discovery call: any 404 means "none here" (the kind's own check explains it)
    assert asyncio.run(client._request("checking that kubeflow.org/v1 is served", call, gone=None)) is None

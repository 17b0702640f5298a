"""NNI's ``platform: adl``: a trial is an AdaptDLJob (adaptdl.petuum.com/v1).

``adaptive: false`` pins the job to one replica and makes it non-preemptible;
``adaptive: true`` lets AdaptDL rescale it (its phases loop through Stopping
and Pending while it does, which stays RUNNING here). ``checkpoint`` becomes a
PersistentVolumeClaim per trial mounted at /adaptdl/checkpoint (AdaptDL's
ADAPTDL_CHECKPOINT_PATH). ``nfs`` with a ``localMountPoint`` is the trial's
storage (code, parameters and metrics); without one it is mounted for data
only and the code travels in a ConfigMap. A trialCodeDirectory that does not
exist here is taken to be a folder of the image, as NNI's AdaptDL had it: the
trial runs there and only parameters and the SDK are shipped.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from trialflow.config.platforms import AdaptdlConfig, KubernetesStorageConfig
from trialflow.platforms.base import TrialSpec, TrialStatus
from trialflow.platforms.kubernetes.client import Resource
from trialflow.platforms.kubernetes.manifests import (
    PodParts,
    object_name,
    resources,
    trial_labels,
)
from trialflow.platforms.kubernetes.platform import KubernetesPlatform

ADAPTDLJOB = Resource("adaptdl.petuum.com", "v1", "adaptdljobs", "AdaptDLJob")
CONTAINER = "main"
CHECKPOINT_PATH = "/adaptdl/checkpoint"

PHASE_TABLE: dict[str, TrialStatus] = {
    "Pending": TrialStatus.WAITING,
    "Starting": TrialStatus.WAITING,
    "Running": TrialStatus.RUNNING,
    "Stopping": TrialStatus.RUNNING,
    "Succeeded": TrialStatus.SUCCEEDED,
    "Failed": TrialStatus.FAILED,
}
#: AdaptDL's pod labels.
JOB_LABEL = "adaptdl/job"
REPLICA_LABEL = "adaptdl/replica"


def adaptdl_status(obj: Mapping[str, Any]) -> tuple[TrialStatus, str | None]:
    status = obj.get("status") or {}
    result = PHASE_TABLE.get(status.get("phase") or "Pending", TrialStatus.WAITING)
    message = " ".join(str(x) for x in (status.get("reason"), status.get("message")) if x) or None
    return result, message if result == TrialStatus.FAILED else None


def checkpoint_claim(config: AdaptdlConfig, spec: TrialSpec, name: str) -> dict[str, Any] | None:
    if config.checkpoint is None:
        return None
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": f"{name[:52]}-checkpoint", "labels": trial_labels(spec)},
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "storageClassName": config.checkpoint.storage_class,
            "resources": {"requests": {"storage": config.checkpoint.storage_size}},
        },
    }


def build_adaptdljob(config: AdaptdlConfig, spec: TrialSpec, name: str, pod: PodParts) -> dict[str, Any]:
    container = pod.container(
        CONTAINER, config.docker_image, spec.command, resources(config.cpu_number, config.memory_size, spec.gpu_number)
    )
    volumes = list(pod.volumes)
    claim = checkpoint_claim(config, spec, name)
    if claim is not None:
        volumes.append({"name": "checkpoint", "persistentVolumeClaim": {"claimName": claim["metadata"]["name"]}})
        container["volumeMounts"].append({"name": "checkpoint", "mountPath": CHECKPOINT_PATH})
        container["env"].append({"name": "ADAPTDL_CHECKPOINT_PATH", "value": CHECKPOINT_PATH})
    if config.nfs is not None and config.nfs.local_mount_point is None:  # data only
        volumes.append({"name": "adl-nfs", "nfs": {"server": config.nfs.server, "path": config.nfs.path}})
        container["volumeMounts"].append({"name": "adl-nfs", "mountPath": config.nfs.container_mount_path})
    template = pod.template([container], restart_policy="Never")
    template["spec"]["volumes"] = volumes
    if config.image_pull_secrets:
        template["spec"]["imagePullSecrets"] = [dict(s) for s in config.image_pull_secrets]
    job_spec: dict[str, Any] = {"template": template, "preemptible": config.adaptive}
    if not config.adaptive:
        job_spec["maxReplicas"] = 1
    return {
        "apiVersion": ADAPTDLJOB.api_version,
        "kind": ADAPTDLJOB.kind,
        "metadata": {"name": name, "labels": dict(pod.labels)},
        "spec": job_spec,
    }


class AdaptdlPlatform(KubernetesPlatform):
    name: ClassVar[str] = "adl"
    nni_platform: ClassVar[str] = "adl"
    resource: ClassVar[Resource] = ADAPTDLJOB
    metrics_container: ClassVar[str | None] = CONTAINER
    config: AdaptdlConfig

    @property
    def storage(self) -> KubernetesStorageConfig | None:
        nfs = self.config.nfs
        if nfs is not None and nfs.local_mount_point is not None:
            return KubernetesStorageConfig(
                storage_type="nfs",
                server=nfs.server,
                path=nfs.path,
                local_mount_point=nfs.local_mount_point,
                container_mount_point=nfs.container_mount_path,
            )
        return super().storage

    def code_in_image(self, code_dir: Path) -> bool:
        """NNI's AdaptDL expected the code in the image (its example's codeDir is /cifar10): a code
        directory that is not here is taken to be the image's."""
        return not Path(code_dir).is_dir()

    def build_job(self, spec: TrialSpec, name: str, pod: PodParts) -> dict[str, Any]:
        return build_adaptdljob(self.config, spec, name, pod)

    def extra_objects(self, spec: TrialSpec) -> list[dict[str, Any]]:
        claim = checkpoint_claim(self.config, spec, object_name(spec.trial_id))
        return [claim] if claim is not None else []

    def status_of(self, obj: Mapping[str, Any]) -> tuple[TrialStatus, str | None]:
        return adaptdl_status(obj)

    def metrics_pod_selector(self, name: str) -> str:
        return f"{JOB_LABEL}={name},{REPLICA_LABEL}=0"

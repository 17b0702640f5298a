"""NNI's ``platform: kubeflow``: a trial is a Kubeflow TFJob or PyTorchJob (training operator v1).

The operator's older apiVersions in NNI configs (v1alpha2, v1beta1, v1beta2)
are accepted and sent as ``kubeflow.org/v1``, the only version the training
operator still serves (said once in the log). Replica types and container names
are the operator's: TF Worker/PS (container ``tensorflow``), PyTorch
Master/Worker (``pytorch``). restartPolicy Never: a failed replica fails the
trial (NNI sent ExitCode, which restarts on retryable codes and hides failures
from the tuner). cleanPodPolicy None keeps finished pods so their logs stay
readable.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, ClassVar

from trialflow.config.platforms import KubeflowConfig, KubeflowRoleConfig
from trialflow.platforms.base import Connections, TrialSpec, TrialStatus
from trialflow.platforms.kubernetes.client import Resource
from trialflow.platforms.kubernetes.manifests import (
    PodParts,
    StatusRules,
    condition_message,
    condition_status,
    registry_secret,
    registry_secret_name,
    resources,
    trial_labels,
)
from trialflow.platforms.kubernetes.platform import KubernetesPlatform

log = logging.getLogger(__name__)

TFJOB = Resource("kubeflow.org", "v1", "tfjobs", "TFJob")
PYTORCHJOB = Resource("kubeflow.org", "v1", "pytorchjobs", "PyTorchJob")

#: Priority order: terminal conditions first. Created alone is WAITING.
STATUS_RULES: StatusRules = (
    ("Failed", TrialStatus.FAILED),
    ("Succeeded", TrialStatus.SUCCEEDED),
    ("Running", TrialStatus.RUNNING),
    ("Restarting", TrialStatus.RUNNING),
    ("Suspended", TrialStatus.WAITING),
    ("Created", TrialStatus.WAITING),
)

#: operator -> (resource, replica spec key, container name, [(config role, replica type)])
OPERATORS: dict[str, tuple[Resource, str, str, tuple[tuple[str, str], ...]]] = {
    "tf-operator": (TFJOB, "tfReplicaSpecs", "tensorflow", (("worker", "Worker"), ("ps", "PS"))),
    "pytorch-operator": (PYTORCHJOB, "pytorchReplicaSpecs", "pytorch", (("master", "Master"), ("worker", "Worker"))),
}
#: The training operator labels pods with these (pkg/apis/kubeflow.org/v1 common types).
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"


def kubeflow_status(obj: Mapping[str, Any]) -> tuple[TrialStatus, str | None]:
    status = condition_status(obj, STATUS_RULES) or TrialStatus.WAITING
    message = condition_message(obj, "Failed") if status == TrialStatus.FAILED else None
    return status, message


def roles(config: KubeflowConfig) -> list[tuple[str, str, KubeflowRoleConfig]]:
    """(config role, replica type, role config) for the roles present, metrics role first."""
    _, _, _, table = OPERATORS[config.operator]
    return [(role, rtype, getattr(config, role)) for role, rtype in table if getattr(config, role) is not None]


def build_job(config: KubeflowConfig, spec: TrialSpec, name: str, pod: PodParts) -> dict[str, Any]:
    resource, specs_key, container, _ = OPERATORS[config.operator]
    replica_specs: dict[str, Any] = {}
    for role, rtype, role_config in roles(config):
        pull = [registry_secret_name(spec.experiment_id, role)] if role_config.private_registry_auth_path else None
        c = pod.container(
            container,
            role_config.docker_image,
            role_config.command,
            resources(role_config.cpu_number, role_config.memory_size, role_config.gpu_number),
        )
        replica_specs[rtype] = {
            "replicas": role_config.replicas,
            "restartPolicy": "Never",
            "template": pod.template([c], pull_secrets=pull),
        }
    return {
        "apiVersion": resource.api_version,
        "kind": resource.kind,
        "metadata": {"name": name, "labels": dict(pod.labels)},
        "spec": {"runPolicy": {"cleanPodPolicy": "None", "backoffLimit": 0}, specs_key: replica_specs},
    }


class KubeflowPlatform(KubernetesPlatform):
    name: ClassVar[str] = "kubeflow"
    nni_platform: ClassVar[str] = "kubeflow"
    config: KubeflowConfig

    def __init__(self, config: KubeflowConfig, experiment_dir: Any, connections: Connections | None = None):
        super().__init__(config, experiment_dir, connections)
        if config.api_version != "v1":
            log.info(
                "kubeflow apiVersion %s is sent as kubeflow.org/v1 (the training operator serves only v1)",
                config.api_version,
            )

    @property
    def resource(self) -> Resource:  # type: ignore[override]
        return OPERATORS[self.config.operator][0]

    @property
    def metrics_container(self) -> str:  # type: ignore[override]
        return OPERATORS[self.config.operator][2]

    def build_job(self, spec: TrialSpec, name: str, pod: PodParts) -> dict[str, Any]:
        return build_job(self.config, spec, name, pod)

    def status_of(self, obj: Mapping[str, Any]) -> tuple[TrialStatus, str | None]:
        return kubeflow_status(obj)

    def metrics_pod_selector(self, name: str) -> str:
        _, rtype, _ = roles(self.config)[0]
        return f"{JOB_NAME_LABEL}={name},{REPLICA_TYPE_LABEL}={rtype.lower()},{REPLICA_INDEX_LABEL}=0"

    def extra_objects(self, spec: TrialSpec) -> list[dict[str, Any]]:
        return [
            registry_secret(spec.experiment_id, role, rc.private_registry_auth_path, trial_labels(spec))
            for role, _, rc in roles(self.config)
            if rc.private_registry_auth_path
        ]

"""``platform: kubeflow-trainer``: a trial is a Kubeflow Trainer v2 TrainJob (trainer.kubeflow.org/v1alpha1).

trialflow's addition for Kubeflow's main line: the runtime (``runtimeRef``, a
ClusterTrainingRuntime by default) brings the pod; the TrainJob gives the
image, the command (trialflow's start script around trialCommand), env,
numNodes and resourcesPerNode, and adds the trial's volumes through
``podTemplateOverrides`` on the ``node`` job. Cancel deletes it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from trialflow.config.platforms import KubeflowTrainerConfig
from trialflow.platforms.base import TrialSpec, TrialStatus
from trialflow.platforms.kubernetes.client import Resource
from trialflow.platforms.kubernetes.manifests import (
    PodParts,
    StatusRules,
    condition_message,
    condition_status,
    resources,
)
from trialflow.platforms.kubernetes.platform import KubernetesPlatform

TRAINJOB = Resource("trainer.kubeflow.org", "v1alpha1", "trainjobs", "TrainJob")
NODE_JOB = "node"  # the runtime's training job (and its container) by Trainer's convention

STATUS_RULES: StatusRules = (
    ("Failed", TrialStatus.FAILED),
    ("Complete", TrialStatus.SUCCEEDED),
    ("Suspended", TrialStatus.WAITING),
)
#: JobSet and Job label the pods with these.
JOBSET_LABEL = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
COMPLETION_INDEX_LABEL = "batch.kubernetes.io/job-completion-index"


def trainjob_status(obj: Mapping[str, Any]) -> tuple[TrialStatus, str | None]:
    status = condition_status(obj, STATUS_RULES)
    if status is not None:
        return status, condition_message(obj, "Failed") if status == TrialStatus.FAILED else None
    jobs = (obj.get("status") or {}).get("jobsStatus") or []
    if any(int(j.get("active") or 0) > 0 or int(j.get("ready") or 0) > 0 for j in jobs):
        return TrialStatus.RUNNING, None
    return TrialStatus.WAITING, None


def build_trainjob(config: KubeflowTrainerConfig, spec: TrialSpec, name: str, pod: PodParts) -> dict[str, Any]:
    container = pod.container(
        NODE_JOB,
        config.docker_image or "",
        spec.command,
        resources(config.cpu_number, config.memory_size, spec.gpu_number),
    )
    trainer: dict[str, Any] = {"command": container["command"], "env": container["env"], "numNodes": config.num_nodes}
    if config.docker_image:
        trainer["image"] = config.docker_image
    if "resources" in container:
        trainer["resourcesPerNode"] = container["resources"]
    override: dict[str, Any] = {
        "targetJobs": [{"name": NODE_JOB}],
        "metadata": {"labels": dict(pod.labels)},
        "spec": {"volumes": pod.volumes, "containers": [{"name": NODE_JOB, "volumeMounts": container["volumeMounts"]}]},
    }
    if pod.service_account:
        override["spec"]["serviceAccountName"] = pod.service_account
    return {
        "apiVersion": TRAINJOB.api_version,
        "kind": TRAINJOB.kind,
        "metadata": {"name": name, "labels": dict(pod.labels)},
        "spec": {
            "runtimeRef": {"name": config.runtime_ref, "apiGroup": TRAINJOB.group, "kind": config.runtime_kind},
            "trainer": trainer,
            "podTemplateOverrides": [override],
        },
    }


class KubeflowTrainerPlatform(KubernetesPlatform):
    name: ClassVar[str] = "kubeflow-trainer"
    nni_platform: ClassVar[str] = "kubeflow"
    resource: ClassVar[Resource] = TRAINJOB
    metrics_container: ClassVar[str | None] = NODE_JOB
    config: KubeflowTrainerConfig

    def build_job(self, spec: TrialSpec, name: str, pod: PodParts) -> dict[str, Any]:
        return build_trainjob(self.config, spec, name, pod)

    def status_of(self, obj: Mapping[str, Any]) -> tuple[TrialStatus, str | None]:
        return trainjob_status(obj)

    def metrics_pod_selector(self, name: str) -> str:
        return f"{JOBSET_LABEL}={name},{REPLICATED_JOB_LABEL}={NODE_JOB},{COMPLETION_INDEX_LABEL}=0"

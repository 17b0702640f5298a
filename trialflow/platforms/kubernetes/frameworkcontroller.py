"""NNI's ``platform: frameworkcontroller``: a trial is a FrameworkController Framework.

One taskRole per configured role (v1's minSucceededTaskCount is read as NNI's
minSucceedTaskCount and sent as FrameworkController's minSucceededTaskCount).
NNI v1's ``configPath`` gives a Framework YAML whose taskRoles are used as the
template: trialflow adds its volumes, mounts, env and start script to each
role's first container and keeps everything else. Cancel is executionType
Stop (the controller then completes the attempt), not a delete, so the
Framework's final status stays readable.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import yaml

from trialflow.config.files import MAX_CONFIG_BYTES, FileProblem, load_yaml, read_bounded
from trialflow.config.platforms import FrameworkControllerConfig
from trialflow.platforms.base import TrialSpec, TrialStatus
from trialflow.platforms.kubernetes.client import KubernetesError, Resource
from trialflow.platforms.kubernetes.manifests import (
    PodParts,
    registry_secret,
    registry_secret_name,
    resources,
    trial_labels,
)
from trialflow.platforms.kubernetes.platform import KubernetesPlatform

FRAMEWORK = Resource("frameworkcontroller.microsoft.com", "v1", "frameworks", "Framework")

#: status.state -> TrialStatus; Completed is decided by completionStatus.type.name.
STATE_TABLE: dict[str, TrialStatus] = {
    "AttemptCreationPending": TrialStatus.WAITING,
    "AttemptCreationRequested": TrialStatus.WAITING,
    "AttemptPreparing": TrialStatus.WAITING,
    "AttemptRunning": TrialStatus.RUNNING,
    "AttemptDeletionPending": TrialStatus.RUNNING,
    "AttemptDeletionRequested": TrialStatus.RUNNING,
    "AttemptDeleting": TrialStatus.RUNNING,
    "AttemptCompleted": TrialStatus.RUNNING,  # a retry may follow; only Completed is final
}
COMPLETION_TABLE: dict[str, TrialStatus] = {"Succeeded": TrialStatus.SUCCEEDED, "Failed": TrialStatus.FAILED}
#: FrameworkController's pod labels.
FRAMEWORK_LABEL = "FC_FRAMEWORK_NAME"
TASKROLE_LABEL = "FC_TASKROLE_NAME"
TASK_INDEX_LABEL = "FC_TASK_INDEX"


def framework_status(obj: Mapping[str, Any]) -> tuple[TrialStatus, str | None]:
    status = obj.get("status") or {}
    state = status.get("state")
    if state == "Completed":
        completion = (status.get("attemptStatus") or {}).get("completionStatus") or {}
        kind = ((completion.get("type") or {}).get("name")) or "Failed"
        result = COMPLETION_TABLE.get(kind, TrialStatus.FAILED)
        message = None
        if result == TrialStatus.FAILED:
            message = " ".join(str(x) for x in (completion.get("phrase"), completion.get("diagnostics")) if x) or None
        return result, message
    return STATE_TABLE.get(state or "", TrialStatus.WAITING), None


def template_roles(path: Path) -> list[dict[str, Any]]:
    try:
        data = load_yaml(read_bounded(Path(path), MAX_CONFIG_BYTES, "Framework template"))[0]
        task_roles = data["spec"]["taskRoles"]
        assert isinstance(task_roles, list) and task_roles
        for role in task_roles:
            assert role["task"]["pod"]["spec"]["containers"]
    except FileProblem as exc:
        raise KubernetesError(
            f"configPath {path}: {exc.message}" + (f" (line {exc.line})" if exc.line else "")
        ) from None
    except (OSError, yaml.YAMLError, KeyError, TypeError, AssertionError) as exc:
        raise KubernetesError(
            f"configPath {path}: expected a Framework with spec.taskRoles[].task.pod.spec."
            f"containers ({type(exc).__name__}: {exc})"
        ) from None
    return task_roles


def build_framework(config: FrameworkControllerConfig, spec: TrialSpec, name: str, pod: PodParts) -> dict[str, Any]:
    task_roles: list[dict[str, Any]] = []
    if config.config_path is not None:
        for role in copy.deepcopy(template_roles(config.config_path)):
            pod_spec = role["task"]["pod"]["spec"]
            first = pod_spec["containers"][0]
            command = " ".join(first.get("command", []) + first.get("args", [])) or (config.trial_command or "")
            ours = pod.container(
                first.get("name", role["name"]),
                first.get("image", "msranni/nni:latest"),
                config.trial_command or command,
                first.get("resources") or {},
            )
            first.update({k: v for k, v in ours.items() if k in ("command", "env")})
            first.pop("args", None)
            taken = {m.get("mountPath") for m in first.get("volumeMounts", [])}
            first["volumeMounts"] = list(first.get("volumeMounts", [])) + [
                m for m in ours["volumeMounts"] if m["mountPath"] not in taken
            ]
            pod_spec["volumes"] = list(pod_spec.get("volumes", [])) + pod.volumes
            pod_spec.setdefault("restartPolicy", "Never")
            role["task"]["pod"].setdefault("metadata", {}).setdefault("labels", {}).update(pod.labels)
            task_roles.append(role)
    for task_role in config.task_roles:
        pull = (
            [registry_secret_name(spec.experiment_id, task_role.name)] if task_role.private_registry_auth_path else None
        )
        container = pod.container(
            task_role.name,
            task_role.docker_image,
            task_role.command,
            resources(task_role.cpu_number, task_role.memory_size, task_role.gpu_number),
        )
        policy = task_role.framework_attempt_completion_policy
        task_roles.append(
            {
                "name": task_role.name,
                "taskNumber": task_role.task_number,
                "frameworkAttemptCompletionPolicy": {
                    "minFailedTaskCount": policy.min_failed_task_count,
                    "minSucceededTaskCount": policy.min_succeed_task_count,
                },
                "task": {
                    "retryPolicy": {"fancyRetryPolicy": False, "maxRetryCount": 0},
                    "pod": pod.template([container], restart_policy="Never", pull_secrets=pull),
                },
            }
        )
    return {
        "apiVersion": FRAMEWORK.api_version,
        "kind": FRAMEWORK.kind,
        "metadata": {"name": name, "labels": dict(pod.labels)},
        "spec": {
            "executionType": "Start",
            "retryPolicy": {"fancyRetryPolicy": False, "maxRetryCount": 0},
            "taskRoles": task_roles,
        },
    }


class FrameworkControllerPlatform(KubernetesPlatform):
    name: ClassVar[str] = "frameworkcontroller"
    nni_platform: ClassVar[str] = "frameworkcontroller"
    resource: ClassVar[Resource] = FRAMEWORK
    cancel_by_delete: ClassVar[bool] = False
    stop_patch: ClassVar[dict[str, Any]] = {"spec": {"executionType": "Stop"}}
    storage_required: ClassVar[str | None] = (
        "FrameworkController deletes a task's pods as soon as its attempt completes, so their logs cannot be "
        "trusted to still hold the last metrics: configure storage (nfs, azureStorage or pvc), as NNI required"
    )
    config: FrameworkControllerConfig

    def build_job(self, spec: TrialSpec, name: str, pod: PodParts) -> dict[str, Any]:
        return build_framework(self.config, spec, name, pod)

    def status_of(self, obj: Mapping[str, Any]) -> tuple[TrialStatus, str | None]:
        return framework_status(obj)

    def _first_role(self) -> tuple[str, str]:
        if self.config.config_path is not None:
            role = template_roles(self.config.config_path)[0]
            return role["name"], role["task"]["pod"]["spec"]["containers"][0].get("name", role["name"])
        return self.config.task_roles[0].name, self.config.task_roles[0].name

    def metrics_pod_selector(self, name: str) -> str:
        return f"{FRAMEWORK_LABEL}={name},{TASKROLE_LABEL}={self._first_role()[0]},{TASK_INDEX_LABEL}=0"

    def log_container(self) -> str:
        return self._first_role()[1]

    def extra_objects(self, spec: TrialSpec) -> list[dict[str, Any]]:
        return [
            registry_secret(spec.experiment_id, r.name, r.private_registry_auth_path, trial_labels(spec))
            for r in self.config.task_roles
            if r.private_registry_auth_path
        ]

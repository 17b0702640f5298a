"""Pure builders every Kubernetes kind shares: object names and labels, status from
conditions, resources, the parts every pod of a trial gets, and the small objects besides the
job. No client, no I/O (but reading a registry auth file), so all of it is tested without a
cluster.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trialflow.platforms.base import TrialSpec, TrialStatus
from trialflow.platforms.kubernetes.client import KubernetesError

NAME_LIMIT = 63
LABEL_EXPERIMENT = "trialflow.io/experiment"
LABEL_TRIAL = "trialflow.io/trial"
LABEL_MANAGED = "app.kubernetes.io/managed-by"
CANCEL_ANNOTATION = "trialflow.io/cancel"

#: A status rule: (condition type or state value, the TrialStatus it means).
StatusRules = tuple[tuple[str, TrialStatus], ...]


def object_name(trial_id: str, prefix: str = "trialflow") -> str:
    """A DNS-1035 label from the trial id: lowercase, [a-z0-9-], starting with a letter, at most
    63 characters (long ids keep a hash of the whole so two never meet)."""
    name = re.sub(r"[^a-z0-9-]+", "-", f"{prefix}-{trial_id}".lower()).strip("-")
    if len(name) > NAME_LIMIT:
        digest = hashlib.sha256(name.encode()).hexdigest()[:8]
        name = name[: NAME_LIMIT - 9].rstrip("-") + "-" + digest
    return name


def trial_labels(spec: TrialSpec) -> dict[str, str]:
    return {LABEL_MANAGED: "trialflow", LABEL_EXPERIMENT: spec.experiment_id, LABEL_TRIAL: spec.trial_id}


def experiment_selector(experiment_id: str) -> str:
    return f"{LABEL_MANAGED}=trialflow,{LABEL_EXPERIMENT}={experiment_id}"


def condition_status(obj: Mapping[str, Any], rules: StatusRules) -> TrialStatus | None:
    """The first rule whose condition type is present with status "True" (rules in priority
    order: terminal first), or None. Reading only the last condition is wrong: operators
    append and flip conditions, and the last one is not always the state."""
    true_types = {
        c.get("type") for c in (obj.get("status") or {}).get("conditions") or [] if str(c.get("status")) == "True"
    }
    for kind, status in rules:
        if kind in true_types:
            return status
    return None


def condition_message(obj: Mapping[str, Any], kind: str) -> str | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind and str(c.get("status")) == "True":
            return " ".join(x for x in (c.get("reason"), c.get("message")) if x) or None
    return None


def resources(cpu: float | None, memory_mb: int | None, gpus: int) -> dict[str, Any]:
    """requests == limits, as NNI set them; GPUs as nvidia.com/gpu."""
    amounts: dict[str, Any] = {}
    if cpu is not None:
        amounts["cpu"] = f"{cpu:g}"
    if memory_mb is not None:
        amounts["memory"] = f"{int(memory_mb)}Mi"
    if gpus:
        amounts["nvidia.com/gpu"] = gpus
    return {"requests": dict(amounts), "limits": dict(amounts)} if amounts else {}


@dataclass(frozen=True)
class PodParts:
    """What every pod of a trial gets, whatever its role: labels, env, volumes, start script."""

    labels: dict[str, str]
    env: list[dict[str, str]]
    volumes: list[dict[str, Any]]
    volume_mounts: list[dict[str, Any]]
    script: Callable[[str], str]
    service_account: str | None

    def container(self, name: str, image: str, command: str, resources_: dict[str, Any]) -> dict[str, Any]:
        container: dict[str, Any] = {
            "name": name,
            "image": image,
            "command": ["sh", "-c", self.script(command)],
            "env": [dict(e) for e in self.env],
            "volumeMounts": [dict(m) for m in self.volume_mounts],
        }
        if resources_:
            container["resources"] = resources_
        return container

    def pod_spec(
        self, containers: list[dict[str, Any]], restart_policy: str | None = None, pull_secrets: list[str] | None = None
    ) -> dict[str, Any]:
        spec: dict[str, Any] = {"containers": containers, "volumes": [dict(v) for v in self.volumes]}
        if restart_policy:
            spec["restartPolicy"] = restart_policy
        if self.service_account:
            spec["serviceAccountName"] = self.service_account
        if pull_secrets:
            spec["imagePullSecrets"] = [{"name": s} for s in pull_secrets]
        return spec

    def template(
        self,
        containers: list[dict[str, Any]],
        restart_policy: str | None = None,
        pull_secrets: list[str] | None = None,
        extra_labels: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        return {
            "metadata": {"labels": {**self.labels, **(extra_labels or {})}},
            "spec": self.pod_spec(containers, restart_policy, pull_secrets),
        }


def job_name(trial_id: str, attempt: int = 0) -> str:
    """The job of a trial's ``attempt``: the first is the trial's own name, a restart after a
    fault a job of its own (``...-a<n>``), so neither replaces the other's pods and logs."""
    return object_name(trial_id if attempt == 0 else f"{trial_id}-a{attempt}")


def config_map_name(name: str) -> str:
    return f"{name[: NAME_LIMIT - 6]}-files"


def cancel_record_name(name: str) -> str:
    return f"{name[: NAME_LIMIT - 7]}-cancel"


def registry_secret(experiment_id: str, role: str, auth_path: Path, labels: dict[str, str]) -> dict[str, Any]:
    """NNI's privateRegistryAuthPath (a docker config.json) as an image pull secret."""
    import base64

    try:
        data = Path(auth_path).read_bytes()
        json.loads(data)
    except OSError as exc:
        raise KubernetesError(f"privateRegistryAuthPath {auth_path}: {exc.strerror}") from None
    except ValueError:
        raise KubernetesError(f"privateRegistryAuthPath {auth_path} is not a docker config.json") from None
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/dockerconfigjson",
        "metadata": {
            "name": registry_secret_name(experiment_id, role),
            "labels": {k: v for k, v in labels.items() if k != LABEL_TRIAL},
        },
        "data": {".dockerconfigjson": base64.b64encode(data).decode()},
    }


def registry_secret_name(experiment_id: str, role: str) -> str:
    return object_name(f"{experiment_id}-{role}-registry")

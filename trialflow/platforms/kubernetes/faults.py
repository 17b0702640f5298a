"""Which ended pods the infrastructure ended, not the trial's own exit: a pure reading of pod
status, for restarts from the last checkpoint (TrainingPlatform.ended_by_fault).

The operators report a job Failed either way (a replica failed); only its pods say why. Kubernetes
writes it in three places: the pod's ``status.reason`` (the kubelet's eviction, a node shut
down or lost), its ``DisruptionTarget`` condition (1.26+: preemption, the taint manager, the
eviction API, the kubelet), and each container's terminated state (``OOMKilled``, or an exit
code above 128: a signal the container did not send itself).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

#: Pod ``status.reason`` values of a pod the node or the scheduler ended, and what they mean.
POD_REASONS = {
    "Evicted": "was evicted by its node (resources ran short)",
    "Preempting": "was preempted by a higher-priority pod",
    "Preempted": "was preempted by a higher-priority pod",
    "NodeLost": "lost its node",
    "NodeShutdown": "was ended by its node's shutdown",
    "Shutdown": "was ended by its node's shutdown",
    "Terminated": "was terminated with its node",
    "UnexpectedAdmissionError": "was refused by its node after scheduling",
}


def pod_fault(pod: Mapping[str, Any]) -> str | None:
    """Why the infrastructure ended this pod, in words; None where nothing says it did."""
    name = str((pod.get("metadata") or {}).get("name", "?"))
    status = pod.get("status") or {}
    reason = status.get("reason")
    if reason in POD_REASONS:
        return f"pod {name} {POD_REASONS[reason]}" + (f": {status['message']}" if status.get("message") else "")
    for condition in status.get("conditions") or []:
        if condition.get("type") == "DisruptionTarget" and condition.get("status") == "True":
            return f"pod {name} was disrupted ({condition.get('reason') or 'DisruptionTarget'})"
    for container in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
        terminated = (container.get("state") or {}).get("terminated") or {}
        code = terminated.get("exitCode")
        if terminated.get("reason") == "OOMKilled":
            return f"container {container.get('name')} of pod {name} was OOM-killed (exit code {code})"
        if isinstance(code, int) and code > 128:
            return f"container {container.get('name')} of pod {name} was killed by signal {code - 128}"
    return None


def job_fault(pods: Iterable[Mapping[str, Any]]) -> str | None:
    """The first fault among a job's pods (sorted by name, so every follower says the same)."""
    for pod in sorted(pods, key=lambda p: str((p.get("metadata") or {}).get("name", ""))):
        fault = pod_fault(pod)
        if fault is not None:
            return fault
    return None

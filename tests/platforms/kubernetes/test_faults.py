"""Which ended pods the infrastructure ended (trialflow.platforms.kubernetes.faults), case by case:
what Kubernetes writes for an eviction, a preemption, a lost node, the OOM killer and a signal,
against a trial's own non-zero exit."""

from __future__ import annotations

import pytest

from trialflow.platforms.kubernetes.faults import POD_REASONS, job_fault, pod_fault
from trialflow.platforms.kubernetes.manifests import job_name, object_name


def _pod(name: str = "p", reason: str | None = None, terminated: dict | None = None, conditions=None) -> dict:
    status: dict = {"phase": "Failed"}
    if reason:
        status.update(reason=reason, message="The node was low on resource: memory.")
    if terminated is not None:
        status["containerStatuses"] = [{"name": "tensorflow", "state": {"terminated": terminated}}]
    if conditions:
        status["conditions"] = conditions
    return {"metadata": {"name": name}, "status": status}


@pytest.mark.parametrize("reason", sorted(POD_REASONS))
def test_a_pod_the_node_or_scheduler_ended_is_a_fault(reason):
    said = pod_fault(_pod(reason=reason))
    assert said is not None and said.startswith("pod p ") and POD_REASONS[reason] in said


@pytest.mark.parametrize(
    "terminated, said",
    [
        ({"exitCode": 137, "reason": "OOMKilled"}, "was OOM-killed (exit code 137)"),
        ({"exitCode": 137, "reason": "Error"}, "was killed by signal 9"),
        ({"exitCode": 143, "reason": "Error"}, "was killed by signal 15"),
    ],
)
def test_the_oom_killer_and_signals_are_faults(terminated, said):
    assert said in (pod_fault(_pod(terminated=terminated)) or "")


def test_disruption_target_is_a_fault():
    condition = {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}
    assert pod_fault(_pod(conditions=[condition])) == "pod p was disrupted (PreemptionByScheduler)"
    assert pod_fault(_pod(conditions=[{**condition, "status": "False"}])) is None


@pytest.mark.parametrize("code", [1, 2, 127, 128])
def test_the_trials_own_exit_is_not(code):
    assert pod_fault(_pod(terminated={"exitCode": code, "reason": "Error"})) is None
    assert pod_fault({"metadata": {"name": "p"}}) is None  # nothing said at all


def test_a_jobs_fault_is_its_first_pod_by_name():
    pods = [_pod("b", reason="Evicted"), _pod("a", terminated={"exitCode": 1}), _pod("c", reason="NodeLost")]
    assert (job_fault(pods) or "").startswith("pod b was evicted")
    assert job_fault([]) is None


def test_each_attempt_has_a_job_of_its_own():
    assert job_name("e1-0003") == object_name("e1-0003")
    assert job_name("e1-0003", 2) == object_name("e1-0003-a2") != job_name("e1-0003", 1)
    long = "e" * 80
    assert len(job_name(long, 3)) <= 63 and job_name(long, 3) != job_name(long)

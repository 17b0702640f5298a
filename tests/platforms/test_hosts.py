"""trialflow.platforms.hosts: which executor runs the tasks, and when a local trial needs one host."""

from __future__ import annotations

import socket

import pytest

from trialflow.platforms.hosts import (
    TrialOnAnotherHost,
    check_host,
    executor_class_name,
    placement_problem,
    spans_hosts,
)


@pytest.mark.parametrize(
    "setting, chosen, expected",
    [
        ("LocalExecutor", None, "LocalExecutor"),
        ("", None, "LocalExecutor"),
        ("CeleryExecutor", None, "CeleryExecutor"),
        (" CeleryExecutor , LocalExecutor ", None, "CeleryExecutor"),
        ("LocalExecutor,CeleryExecutor", None, "LocalExecutor"),
        ("LocalExecutor,CeleryExecutor", "CeleryExecutor", "CeleryExecutor"),
        ("airflow.providers.celery.executors.celery_executor.CeleryExecutor", None, "CeleryExecutor"),
        ("fast:LocalExecutor,gpu:my_company.executors.GpuExecutor", None, "LocalExecutor"),
        ("fast:LocalExecutor,gpu:my_company.executors.GpuExecutor", "gpu", "GpuExecutor"),
        ("fast:LocalExecutor,gpu:my_company.executors.GpuExecutor", "my_company.executors.GpuExecutor", "GpuExecutor"),
        ("LocalExecutor;team_a=CeleryExecutor", None, "LocalExecutor"),
        ("LocalExecutor", "KubernetesExecutor", "KubernetesExecutor"),  # named by the task, not listed
    ],
)
def test_the_executor_that_runs_the_tasks(setting, chosen, expected):
    assert executor_class_name(setting, chosen) == expected


@pytest.mark.parametrize(
    "executor, many",
    [
        ("LocalExecutor", False),
        ("SequentialExecutor", False),
        ("CeleryExecutor", True),
        ("KubernetesExecutor", True),
        ("EdgeExecutor", True),
        ("CeleryKubernetesExecutor", True),
        ("MyLocalExecutor", True),  # unknown: assumed to span hosts
    ],
)
def test_which_executors_span_hosts(executor, many):
    assert spans_hosts(executor) is many


def test_local_trials_under_celery_without_a_queue_are_refused_with_what_to_do():
    key, message = placement_problem(["local"], {"local"}, "CeleryExecutor", None)
    assert key == ("trainingService", "platform")
    for part in ("'local' runs each trial", "CeleryExecutor", "local_queue", "AIRFLOW__TRIALFLOW__LOCAL_QUEUE"):
        assert part in message
    # one host's queue makes it schedulable; so does any single-host executor or platform
    assert placement_problem(["local"], {"local"}, "CeleryExecutor", "gpu-box-1") is None
    assert placement_problem(["local"], {"local"}, "LocalExecutor", None) is None
    assert placement_problem(["remote", "kubeflow"], set(), "CeleryExecutor", None) is None
    # a hybrid config with a local service needs the queue too, and the key says which service
    key, _ = placement_problem(["remote", "local"], {"local"}, "KubernetesExecutor", "")
    assert key == ("trainingService", 1, "platform")


def test_a_trial_on_another_host_is_said_so(monkeypatch):
    here = socket.gethostname()
    check_host("abc-0", {"pid": 1, "host": here})
    check_host("abc-0", {"pid": 1})  # recorded before hosts were: taken as local
    check_host("abc-0", None)
    with pytest.raises(TrialOnAnotherHost) as raised:
        check_host("abc-0", {"pid": 1, "host": "worker-b"})
    message = str(raised.value)
    assert "trial abc-0 runs on host 'worker-b'" in message and repr(here) in message
    assert "local_queue" in message

"""Which host a trial lives on, and whether Airflow's executor keeps its tasks there.

A local trial is a process on the machine whose task started it: only that machine can see
it, read its files or stop it. Under the LocalExecutor every task (and, in the usual
set-up, the triggerer) runs on that one machine. Under the CeleryExecutor, the
KubernetesExecutor or the EdgeExecutor a retry may start on another worker and a deferred
trial is followed by a triggerer that may be elsewhere: from there the trial would look
lost, and a retry would launch it a second time. So an experiment with the local platform
under such an executor has its tasks sent to one queue, which one host serves, and its local
trials are followed to their end in the worker instead of deferring; without a queue it is
refused where the DAG is built, before anything starts. A local trial's handle also records
its host, so a task that still lands on another one fails with that said, not with a lost
or duplicated trial.

Pure: no Airflow here. trialflow.dag reads the settings and asks these functions.
"""

from __future__ import annotations

import socket
from collections.abc import Collection, Mapping, Sequence
from typing import Any

#: Executors that run every task on the machine that runs the scheduler.
SINGLE_HOST_EXECUTORS = frozenset({"LocalExecutor", "SequentialExecutor", "DebugExecutor"})
#: Where a DAG without ``local_queue=`` finds the queue (``AIRFLOW__TRIALFLOW__LOCAL_QUEUE``).
QUEUE_SETTING = ("trialflow", "local_queue")


class TrialOnAnotherHost(RuntimeError):
    """The trial's processes live on another host than this task's (or this trigger's)."""

    def __init__(self, trial_id: str, trial_host: str, here: str):
        super().__init__(
            f"trial {trial_id} runs on host {trial_host!r}, and this runs on {here!r}: a local trial "
            "can only be followed, re-attached or stopped on the host that started it. Send the "
            f"experiment's tasks to a queue that only {trial_host!r} serves (experiment_dag(..., "
            "local_queue=...) or [trialflow] local_queue); this attempt fails so a retry can land there"
        )
        self.trial_id, self.trial_host, self.here = trial_id, trial_host, here


def this_host() -> str:
    return socket.gethostname()


def check_host(trial_id: str, handle: Mapping[str, Any] | None) -> None:
    """Raise TrialOnAnotherHost unless the handle's trial lives here (handles without a host,
    written before hosts were recorded, are taken as local)."""
    recorded = (handle or {}).get("host")
    if recorded and recorded != this_host():
        raise TrialOnAnotherHost(trial_id, recorded, this_host())


def executor_class_name(setting: str, chosen: str | None = None) -> str:
    """The class name of the executor that runs a task, from ``[core] executor`` (Airflow's
    syntax: a comma-separated list, the first the default, each ``name``, ``module.Class`` or
    ``alias:name-or-module.Class``; team lists after ``;`` are not the global default) and the
    task's own ``executor=`` if it names one."""
    entries: list[tuple[str | None, str]] = []
    for item in setting.split(";")[0].strip().strip("=").split(","):
        item = item.strip()
        if not item:
            continue
        alias, _, target = item.rpartition(":")
        entries.append((alias or None, target.strip()))
    if chosen:
        for known_as, path in entries:
            if chosen in (known_as, path, path.rsplit(".", 1)[-1]):
                return path.rsplit(".", 1)[-1]
        return chosen.rsplit(".", 1)[-1]
    if not entries:
        return "LocalExecutor"  # Airflow's default
    return entries[0][1].rsplit(".", 1)[-1]


def spans_hosts(executor_class: str) -> bool:
    """Whether tasks run by this executor may start on different machines. Unknown executors
    are taken to (a custom LocalExecutor subclass just sets a queue it does not use)."""
    return executor_class not in SINGLE_HOST_EXECUTORS


def placement_problem(
    platforms: Sequence[str], host_bound: Collection[str], executor_class: str, queue: str | None
) -> tuple[tuple[str | int, ...], str] | None:
    """Why this experiment cannot be scheduled as configured, as (config key path, message) for
    a ConfigError; None: it can. ``platforms``: the config's training services, in order;
    ``host_bound``: those whose registry entries say host-bound (trialflow.authoring.plan keeps them)."""
    bound = [i for i, name in enumerate(platforms) if name in host_bound]
    if not bound or not spans_hosts(executor_class) or queue:
        return None
    key: tuple[str | int, ...] = ("trainingService", "platform")
    if len(platforms) > 1:
        key = ("trainingService", bound[0], "platform")
    name = platforms[bound[0]]
    return key, (
        f"{name!r} runs each trial as a process on the host whose task starts it, but Airflow's "
        f"executor is {executor_class}, which may start this experiment's tasks, their retries and "
        "the triggerer that follows them on different hosts (the trial would look lost there, or be "
        "launched twice). Expected: a queue that one host's worker serves, given as "
        "experiment_dag(..., local_queue='<queue>') or as [trialflow] local_queue "
        "(AIRFLOW__TRIALFLOW__LOCAL_QUEUE); or a platform for many hosts (remote, kubeflow, "
        "frameworkcontroller...) instead"
    )

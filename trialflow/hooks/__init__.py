"""Airflow glue: connections -> what the Airflow-free core needs (the experiment store, SSH
machines, Kubernetes clusters)."""

from __future__ import annotations

from trialflow.platforms.base import Connections


def airflow_connections() -> Connections:
    """What platforms use to open machines and clusters named by Airflow connections
    (sshConnId, kubernetesConnId): the SSH and cncf-kubernetes providers' hooks. Passed to
    every platform that Airflow code builds (operator, sensor, trigger, end step)."""
    from trialflow.hooks import kubernetes, ssh

    return Connections(ssh=ssh.open_connection, kubernetes=kubernetes.configuration)

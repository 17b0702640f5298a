"""Airflow glue: connections -> clients (the experiment store, SSH machines, Kubernetes clusters)."""

from __future__ import annotations


def register_connectors() -> None:
    """Let the Airflow-free platforms open clients named by Airflow connections (sshConnId,
    kubernetesConnId). Called where Airflow runs trialflow code: operator, sensor, trigger."""
    from trialflow.hooks import kubernetes, ssh

    ssh.register()
    kubernetes.register()

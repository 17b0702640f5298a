"""Airflow glue: connections -> what the Airflow-free core needs (the experiment store, SSH
machines, Kubernetes clusters)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the platforms' core is imported when a task runs, never at DAG parse
    from trialflow.platforms.base import Connections


def airflow_connections() -> Connections:
    """What platforms use to open machines and clusters named by Airflow connections
    (sshConnId, kubernetesConnId, tokenConnId): the SSH and cncf-kubernetes providers' hooks,
    and a connection's password for a token. Passed to
    every platform that Airflow code builds (operator, sensor, trigger, end step).

    Each hook module is imported when a platform first opens a connection, not here: they pull
    in their platform's package and client library, which a trial that names no connection
    never needs (importing both was 15 % of a local trial task's CPU samples, bench/RESULTS.md)."""
    from trialflow.platforms.base import Connections

    return Connections(
        ssh=_ssh_connection,
        kubernetes=_kubernetes_configuration,
        token=connection_password,
        artifacts=_artifact_root,
        others={"connection": airflow_connection},
    )


async def airflow_connection(conn_id: str) -> Any:
    """An Airflow connection by id (its host, login, password and extra), for a plug-in platform
    that builds its own client from one (Connections.opener("connection"))."""
    from airflow.sdk import BaseHook

    return await BaseHook.aget_connection(conn_id)


def _artifact_root(checkpoints: Any, workdir: Any) -> Any:
    from trialflow.hooks.artifact_store import checkpoint_root

    return checkpoint_root(checkpoints, workdir)


async def _ssh_connection(conn_id: str) -> Any:
    from trialflow.hooks import ssh

    return await ssh.open_connection(conn_id)


async def _kubernetes_configuration(conn_id: str) -> Any:
    from trialflow.hooks import kubernetes

    return await kubernetes.configuration(conn_id)


async def connection_password(conn_id: str) -> str:
    """A token kept as an Airflow connection's password (any connection type), so it lives in
    Airflow's connections or secrets backend instead of the experiment's config."""
    from airflow.sdk import BaseHook

    password = (await BaseHook.aget_connection(conn_id)).password
    if not password:
        raise ValueError(f"Airflow connection {conn_id!r} has no password (where trialflow reads the token)")
    return str(password)

"""Machines given as Airflow SSH connections (``sshConnId``): opened by the SSH provider's
SSHHookAsync, so keys, passwords and host keys live in Airflow's connections or secrets
backend and its extras (``host_key``, ``known_hosts``, ``no_host_key_check``, ``key_file``,
``private_key``) mean what they mean everywhere else in Airflow."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trialflow.platforms.remote.ssh import SshError

if TYPE_CHECKING:
    import asyncssh


async def open_connection(conn_id: str) -> asyncssh.SSHClientConnection:
    """An open connection to the machine of Airflow SSH connection ``conn_id``."""
    try:
        from airflow.providers.ssh.hooks.ssh import SSHHookAsync
    except ImportError as exc:  # pragma: no cover - the ssh extra is missing
        raise SshError("sshConnId needs the SSH provider: pip install 'airflow-provider-trialflow[ssh]'") from exc
    return await SSHHookAsync(ssh_conn_id=conn_id).get_conn()

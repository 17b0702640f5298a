"""NNI's ``platform: remote``: trials on machines reached over SSH, everything pulled.

``platform`` (RemotePlatform: submit, poll, stop, cleanup, render), ``machines``
(who the machines are, a shell on each, placement), ``staging`` (the code and
the SDK, once per content), ``commands`` (every shell command, pure builders),
``ssh`` (pooled connections, reconnects).
"""

from __future__ import annotations

from trialflow.platforms.remote.commands import parse_probe, probe_command, read_command, staging_command
from trialflow.platforms.remote.machines import Machine, least_loaded_first, machine_target
from trialflow.platforms.remote.platform import LAUNCH_GRACE_SECONDS, RemotePlatform, remote_status
from trialflow.platforms.remote.ssh import SshError

__all__ = [
    "LAUNCH_GRACE_SECONDS",
    "Machine",
    "RemotePlatform",
    "SshError",
    "least_loaded_first",
    "machine_target",
    "parse_probe",
    "probe_command",
    "read_command",
    "remote_status",
    "staging_command",
]

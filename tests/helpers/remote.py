"""Remote machines of the tests' real sshd servers as a config names them, and the remote platform over them."""

from __future__ import annotations

from pathlib import Path

from trialflow.config.platforms import RemoteConfig
from trialflow.platforms.remote import RemotePlatform


def machine_entry(server, auth: str, **extra) -> dict:
    machine = {
        "host": "127.0.0.1",
        "port": server.port,
        "user": server.user,
        "pythonPath": "/usr/bin",
        "hostKey": server.host_key_line,
    }
    if auth == "key":
        machine["sshKeyFile"] = str(server.client_key)
    else:
        machine["password"] = server.password
    return {**machine, **extra}


def remote_platform(tmp_path: Path, machines: list[dict]) -> RemotePlatform:
    config = RemoteConfig.model_validate({"platform": "remote", "machineList": machines})
    return RemotePlatform(config, tmp_path / "exp")

"""The machines of a remote config: who they are, a shell on each, and where trials go.

A ``Shell`` runs one command on a machine over the pooled SSH connection
(``ssh.POOL``) and knows each machine's base folder; the placement rule
(least loaded first, ties round-robin) is a pure function, tested without a
machine.

Layout on a machine (``<base>`` = ``$HOME/trialflow-experiments``)::

    <base>/.code/<digest>/        the code, once per content (read-only); trialflow's
                                  stdlib-only trial SDK the same way, on PYTHONPATH
    <base>/<experiment>/trials/<trial id>/   NNI_SYS_DIR: parameter.cfg, .nni/metrics,
        stdout.log, stderr, exit_code, pid, code/ (hard-linked read-only view)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from trialflow.config.platforms import RemoteMachineConfig
from trialflow.platforms.remote.ssh import POOL, ConnIdOpener, SshError, SshTarget, StdinSource

BASE_DIR_NAME = "trialflow-experiments"


@dataclass(frozen=True)
class Machine:
    index: int
    config: RemoteMachineConfig
    target: SshTarget

    @property
    def python(self) -> str:
        return f"{self.config.python_path.rstrip('/')}/python3" if self.config.python_path else "python3"


def machine_target(index: int, config: RemoteMachineConfig) -> SshTarget:
    """What the SSH pool needs to reach a machine (its secrets stay in SshTarget, which never
    prints them)."""
    label = config.ssh_conn_id or f"{config.user}@{config.host}:{config.port}"
    return SshTarget(
        label=label,
        host=config.host,
        port=config.port,
        username=config.user,
        password=config.password.get_secret_value() if config.password else None,
        key_file=str(config.ssh_key_file) if config.ssh_key_file else None,
        passphrase=config.ssh_passphrase.get_secret_value() if config.ssh_passphrase else None,
        known_hosts=str(config.known_hosts_file or "~/.ssh/known_hosts"),
        host_key=config.host_key,
        check_host_key=config.host_key_check,
        conn_id=config.ssh_conn_id,
    )


def machines_of(configs: Sequence[RemoteMachineConfig]) -> list[Machine]:
    return [Machine(i, m, machine_target(i, m)) for i, m in enumerate(configs)]


def experiment_root(base: str, experiment_id: str) -> str:
    return f"{base}/{experiment_id}"


def trial_folder(base: str, experiment_id: str, trial_id: str, attempt: int = 0) -> str:
    """A trial's folder on a machine; a restart from a checkpoint (``attempt`` n > 0) gets one
    of its own beside it, ``<trial id>.attempt-<n>``, with its own output and launch marks."""
    name = f"{trial_id}.attempt-{attempt}" if attempt else trial_id
    return f"{experiment_root(base, experiment_id)}/trials/{name}"


def least_loaded_first(machines: Sequence[Machine], loads: Sequence[int], sequence: int) -> list[Machine]:
    """Machines by load (trials of this experiment launched and not ended). Ties go
    round-robin by trial sequence, so trials submitted at the same moment (each seeing the
    same loads) still spread."""
    n = len(machines)
    order = sorted(zip(loads, machines), key=lambda pair: (pair[0], (pair[1].index - sequence) % n))
    return [machine for _, machine in order]


class Shell:
    """Commands on the machines, and each machine's base folder (asked once)."""

    def __init__(self, opener: ConnIdOpener | None = None):
        self._opener = opener
        self._bases: dict[int, str] = {}

    async def run(
        self,
        machine: Machine,
        command: str,
        stdin: bytes | StdinSource | None = None,
        check: bool = True,
        stdout_to: Path | None = None,
    ) -> bytes:
        """The command's stdout (with ``stdout_to``: written to that file, b"" returned); with
        ``check``, a non-zero exit is an SshError naming the machine, the command's start and
        the end of its stderr."""
        status, out, err = await POOL.run(machine.target, command, stdin, opener=self._opener, stdout_to=stdout_to)
        if check and status != 0:
            raise SshError(
                f"machine {machine.target.label}: `{command[:120]}` failed ({status}): "
                f"{err.decode('utf-8', 'replace').strip()[-500:]}"
            )
        return out

    async def base(self, machine: Machine) -> str:
        if machine.index not in self._bases:
            home = (await self.run(machine, 'printf %s "$HOME"')).decode().strip()
            self._bases[machine.index] = f"{home}/{BASE_DIR_NAME}"
        return self._bases[machine.index]

"""NNI's ``platform: remote``: trials on machines reached over SSH, everything pulled.

Nothing on a machine ever connects back (NNI's trials stuck WAITING because
they could not reach the manager cannot happen): trialflow stages the code,
launches the trial detached, and reads status and new metric bytes over SSH.
Every shell command is a pure builder in ``remote_commands``, so what runs on a
machine is visible in ``trialflow render`` and tested without one (with hostile
values in every field: tests/security/test_quoting.py).

Layout on a machine (``<base>`` = ``$HOME/trialflow-experiments``)::

    <base>/.code/<digest>/        the code, once per content (read-only); trialflow's
                                  stdlib-only trial SDK the same way, on PYTHONPATH
    <base>/<experiment>/trials/<trial id>/   NNI_SYS_DIR: parameter.cfg, .nni/metrics,
        stdout.log, stderr, exit_code, pid, code/ (hard-linked read-only view)
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Awaitable, Callable, ClassVar, Mapping

from trialflow.config.model import SharedStorageConfig
from trialflow.config.platforms import RemoteConfig, RemoteMachineConfig
from trialflow.platforms.base import (
    CANCEL_STATUSES,
    Connections,
    Cursor,
    TrainingPlatform,
    TrialHandle,
    TrialSpec,
    TrialStatus,
    TrialUpdate,
)
from trialflow.platforms.gpus import CLAIMS_DIR, GpuRequestError, attempt, release_command
from trialflow.platforms.leftovers import MARK_VAR, stop_marked_command, trial_mark
from trialflow.platforms.local import local_status
from trialflow.platforms.remote_commands import (
    LAUNCH_DIR,
    READ_CHUNK,
    cancel_request_command,
    claim_command,
    cleanup_command,
    exists_command,
    kill_command,
    launch_command,
    launch_once_guard,
    mkdir_command,
    parse_probe,
    path_prefix,
    probe_command,
    read_command,
    running_count_command,
    staging_command,
    trial_body,
    upload_command,
    workdir_command,
)
from trialflow.platforms.ssh import POOL, SshError, SshTarget
from trialflow.trial import unpack
from trialflow.trial.env import trial_env
from trialflow.trial.packing import (
    CodeDirectoryError,
    PackedCode,
    check_limits,
    collect_files,
    known_digest,
    pack,
    pack_sdk,
    remember_digest,
)
from trialflow.trial.protocol import parameter_text, read_stdout_lines

log = logging.getLogger(__name__)
BASE_DIR_NAME = "trialflow-experiments"
GPU_WAIT_SECONDS = 2.0
LAUNCH_GRACE_SECONDS = 60.0
KILL_GRACE_SECONDS = 5.0
#: Seconds a finished trial's leftover processes get between SIGTERM and SIGKILL.
LEFTOVER_GRACE_SECONDS = 2.0


def remote_status(exit_code: int | None, cancel: TrialStatus | None, alive: bool, has_pid: bool,
                  seconds_since_submit: float) -> TrialStatus:
    """local_status's table, plus the one fact only a remote launch has: the pid file is written
    by the detached job itself, so for a moment after submit there is none.

    | pid recorded | exit code | status                                     |
    |--------------|-----------|--------------------------------------------|
    | no           | none      | WAITING for LAUNCH_GRACE_SECONDS, then FAILED |
    | otherwise    |           | as local_status                            |
    """
    if not has_pid and exit_code is None and cancel is None:
        return TrialStatus.WAITING if seconds_since_submit < LAUNCH_GRACE_SECONDS else TrialStatus.FAILED
    return local_status(exit_code, cancel, alive)


@dataclass(frozen=True)
class Machine:
    index: int
    config: RemoteMachineConfig
    target: SshTarget

    @property
    def python(self) -> str:
        return f"{self.config.python_path.rstrip('/')}/python3" if self.config.python_path else "python3"


def machine_target(index: int, config: RemoteMachineConfig) -> SshTarget:
    label = config.ssh_conn_id or f"{config.user}@{config.host}:{config.port}"
    return SshTarget(label=label, host=config.host, port=config.port, username=config.user,
                     password=config.password.get_secret_value() if config.password else None,
                     key_file=str(config.ssh_key_file) if config.ssh_key_file else None,
                     passphrase=config.ssh_passphrase.get_secret_value() if config.ssh_passphrase else None,
                     known_hosts=str(config.known_hosts_file or "~/.ssh/known_hosts"), host_key=config.host_key,
                     check_host_key=config.host_key_check, conn_id=config.ssh_conn_id)


class RemotePlatform(TrainingPlatform[RemoteConfig]):
    name: ClassVar[str] = "remote"

    def __init__(self, config: RemoteConfig, experiment_dir: Path, connections: Connections | None = None):
        super().__init__(config, experiment_dir, connections)
        self.machines = [Machine(i, m, machine_target(i, m)) for i, m in enumerate(config.machine_list)]
        self._homes: dict[int, str] = {}
        self._staged: dict[tuple[int, str], str] = {}
        self.shared_storage: SharedStorageConfig | None = None

    def use_shared_storage(self, shared: SharedStorageConfig | None) -> None:
        """NNI's sharedStorage: code already on storage the machines mount is read in place."""
        self.shared_storage = shared

    def shared_code_path(self, code_dir: Path) -> str | None:
        """Where the machines see ``code_dir``, if it lies on the shared storage and that storage
        is mounted here by the user (usermount); None means: upload it as usual."""
        shared = self.shared_storage
        if shared is None or shared.local_mounted != "usermount":
            return None
        try:
            rel = Path(code_dir).resolve().relative_to(Path(shared.local_mount_point).resolve())
        except ValueError:
            return None
        return f"{shared.remote_mount_point.rstrip('/')}/{rel.as_posix()}".rstrip("/.") or "/"

    def mount_hint(self) -> str:
        shared = self.shared_storage
        assert shared is not None
        source = (f"{shared.nfs_server}:{shared.exported_directory}" if shared.storage_type == "NFS"
                  else f"the Azure blob container {shared.container_name}")
        return f"mount {source} at {shared.remote_mount_point} on it (trialflow never runs sudo mount)"

    async def _code_on(self, machine: Machine, code_dir: Path,
                       exclude: tuple[Path, ...] = ()) -> tuple[str, bool]:
        """(folder with the code on ``machine``, whether trials read it in place)."""
        shared = self.shared_code_path(code_dir)
        if shared is None:
            fp, digest = known_digest(code_dir, exclude)
            if digest is not None:  # packed before in this state: staged there already?
                folder = await self._staged_folder(machine, digest[:16])
                if folder is not None:
                    return folder, False
            packed = pack(code_dir, exclude)
            remember_digest(fp, packed)
            return await self._stage(machine, packed, "code"), False
        there = await self._run(machine, exists_command(shared, "d"))
        if there.strip() != b"yes":
            raise SshError(f"machine {machine.target.label}: the code is on sharedStorage but {shared} is not "
                           f"there; {self.mount_hint()}")
        return shared, True

    # -- remote commands ------------------------------------------------------------------

    async def _run(self, machine: Machine, command: str, stdin: bytes | None = None, check: bool = True) -> bytes:
        status, out, err = await POOL.run(machine.target, command, stdin, opener=self.connections.ssh)
        if check and status != 0:
            raise SshError(f"machine {machine.target.label}: `{command[:120]}` failed ({status}): "
                           f"{err.decode('utf-8', 'replace').strip()[-500:]}")
        return out

    async def _base(self, machine: Machine) -> str:
        if machine.index not in self._homes:
            home = (await self._run(machine, 'printf %s "$HOME"')).decode().strip()
            self._homes[machine.index] = f"{home}/{BASE_DIR_NAME}"
        return self._homes[machine.index]

    def experiment_root(self, base: str, experiment_id: str) -> str:
        return f"{base}/{experiment_id}"

    def trial_dir(self, base: str, experiment_id: str, trial_id: str) -> str:
        return f"{self.experiment_root(base, experiment_id)}/trials/{trial_id}"

    # -- staging --------------------------------------------------------------------------

    @property
    def _sdk(self) -> PackedCode:
        return pack_sdk()

    async def _staged_folder(self, machine: Machine, short_digest: str) -> str | None:
        """The folder holding content ``short_digest`` on ``machine``, if it was staged completely."""
        folder = f"{await self._base(machine)}/.code/{short_digest}"
        found = await self._run(machine, exists_command(f"{folder}/.complete"))
        return folder if found.strip() == b"yes" else None

    async def _stage(self, machine: Machine, packed: PackedCode, kind: str) -> str:
        """Make ``packed`` present on ``machine`` (uploading only if its digest is new there);
        return the folder."""
        key = (machine.index, packed.digest)
        if key in self._staged:
            return self._staged[key]
        base = await self._base(machine)
        folder = f"{base}/.code/{packed.short_digest}"
        if await self._staged_folder(machine, packed.short_digest) is None:
            archive = f"{base}/.upload-{kind}-{packed.short_digest}-{time.time_ns()}.tar.gz"
            await self._run(machine, upload_command(base, archive), packed.archive)
            await self._run(machine, upload_command(base, f"{archive}.py"), Path(unpack.__file__).read_bytes())
            await self._run(machine, staging_command(base, packed.short_digest, archive, machine.python))
        self._staged[key] = folder
        return folder

    async def prepare(self, experiment_id: str) -> None:
        """Check every machine is reachable (clear errors for keys, host keys, addresses) and
        stage trialflow's SDK there; the code is staged by the first trial that needs it."""
        async def one(machine: Machine) -> None:
            base = await self._base(machine)
            await self._run(machine, mkdir_command(f"{self.experiment_root(base, experiment_id)}/trials"))
            await self._stage(machine, self._sdk, "sdk")

        await asyncio.gather(*(one(m) for m in self.machines))

    async def stage_code(self, code_dir: Path, excludes: tuple[Path, ...] = ()) -> list[str]:
        """Put the code on every machine now (submit does it per machine when needed): the
        folder each reads it from."""
        async def one(machine: Machine) -> str:
            return (await self._code_on(machine, Path(code_dir), excludes))[0]

        return list(await asyncio.gather(*(one(m) for m in self.machines)))

    def preflight(self, code_dir: Path, excludes: tuple[Path, ...] = ()) -> list[tuple[tuple[str | int, ...], str]]:
        """The code must exist and fit NNI's upload limits: said by validate, not the first trial."""
        if not Path(code_dir).is_dir():
            return [(("trialCodeDirectory",), f"the trial code directory {code_dir} does not exist")]
        if self.shared_code_path(code_dir) is not None:
            return []  # read in place on the machines: nothing is uploaded
        try:
            check_limits(code_dir, collect_files(code_dir, excludes))
        except CodeDirectoryError as exc:
            return [(("trialCodeDirectory",), str(exc))]
        return []

    # -- placement ------------------------------------------------------------------------

    async def _running_on(self, machine: Machine, experiment_id: str) -> int:
        base = await self._base(machine)
        out = await self._run(machine, running_count_command(f"{self.experiment_root(base, experiment_id)}/trials"),
                              check=False)
        try:
            return int(out.strip() or 0)
        except ValueError:
            return 0

    async def _order(self, spec: TrialSpec) -> list[Machine]:
        """Machines, least loaded first (trials of this experiment launched and not ended). Ties
        go round-robin by trial sequence, so trials submitted at the same moment (each seeing
        the same loads) still spread."""
        if len(self.machines) == 1:
            return list(self.machines)
        loads = await asyncio.gather(*(self._running_on(m, spec.experiment_id) for m in self.machines))
        n = len(self.machines)
        return [m for _, m in sorted(zip(loads, self.machines),
                                     key=lambda pair: (pair[0], (pair[1].index - spec.sequence) % n))]

    # -- trials ---------------------------------------------------------------------------

    def build_env(self, spec: TrialSpec, trial_dir: str, code_dir: str, sdk_dir: str,
                  machine: Machine, gpus: list[int] | None = None) -> dict[str, str]:
        env = trial_env(platform="remote", experiment_id=spec.experiment_id, trial_id=spec.trial_id,
                        sys_dir=trial_dir, output_dir=trial_dir, sequence=spec.sequence, code_dir=code_dir,
                        gpu_indices=gpus or [], base={})
        env[MARK_VAR] = trial_mark(trial_dir)
        env.update(spec.env)
        return env

    def build_command(self, spec: TrialSpec, trial_dir: str, sdk_dir: str, machine: Machine,
                      release: str = "") -> str:
        """What the detached wrapper runs; after the trial, the processes it left behind are
        stopped and its GPU claims released."""
        leftovers = stop_marked_command(trial_mark(trial_dir), LEFTOVER_GRACE_SECONDS)
        return trial_body(trial_dir, spec.command, sdk_dir, machine.config.python_path, [leftovers, release])

    def launch_script(self, spec: TrialSpec, machine: Machine, trial_dir: str, code_dir: str, sdk_dir: str,
                      claims: list[tuple[int, int]] | None = None, base: str = "") -> str:
        env = self.build_env(spec, trial_dir, code_dir, sdk_dir, machine, [i for i, _ in claims or []])
        release = release_command(f"{base}/{CLAIMS_DIR}", claims) if claims else ""
        return launch_command(self.build_command(spec, trial_dir, sdk_dir, machine, release), trial_dir, env)

    async def _claim_gpus(self, spec: TrialSpec, trial_for: "Callable[[Machine], Awaitable[str]]",
                          order: list[Machine]) -> tuple[Machine, list[tuple[int, int]]]:
        """The first machine (in placement order) with trialGpuNumber free GPUs, and the claims;
        waits while every machine is full, refuses a request no machine can ever take."""
        refusals: list[str] = []
        waited = False
        while True:
            for machine in order:
                base = await self._base(machine)

                async def run(command: str, machine: Machine = machine) -> str:
                    return (await self._run(machine, path_prefix(machine.config.python_path) + command, check=False)).decode()

                try:
                    picks = await attempt(run, f"{base}/{CLAIMS_DIR}", spec.gpu_number,
                                          machine.config.max_trial_number_per_gpu, machine.config.gpu_indices,
                                          machine.config.use_active_gpu, await trial_for(machine), machine.target.label)
                except GpuRequestError as exc:
                    refusals.append(str(exc))
                    continue
                if picks is not None:
                    return machine, picks
            if len(refusals) >= len(order):
                raise GpuRequestError("; ".join(dict.fromkeys(refusals)))
            refusals.clear()
            if not waited:
                log.info("Trial %s waits for %d free GPU(s) on %d machine(s)", spec.trial_id, spec.gpu_number, len(order))
            waited = True
            await asyncio.sleep(GPU_WAIT_SECONDS)

    async def submit(self, spec: TrialSpec) -> TrialHandle:
        for machine in self.machines:  # re-attach: the trial may already run on any machine
            base = await self._base(machine)
            trial_dir = self.trial_dir(base, spec.experiment_id, spec.trial_id)
            if (await self._run(machine, exists_command(f"{trial_dir}/{LAUNCH_DIR}", "d"))).strip():
                return self._handle(spec, machine, trial_dir)
        claims: list[tuple[int, int]] = []
        order = await self._order(spec)
        if spec.gpu_number > 0:
            async def trial_for(m: Machine) -> str:
                return self.trial_dir(await self._base(m), spec.experiment_id, spec.trial_id)

            machine, claims = await self._claim_gpus(spec, trial_for, order)
        else:
            machine = order[0]
        base = await self._base(machine)
        trial_dir = self.trial_dir(base, spec.experiment_id, spec.trial_id)
        try:
            code_folder, in_place = await self._code_on(machine, spec.code_dir, spec.code_excludes)
            sdk_folder = await self._stage(machine, self._sdk, "sdk")
            claimed = await self._run(machine, claim_command(trial_dir))
        except BaseException:
            if claims:
                await self._run(machine, release_command(f"{base}/{CLAIMS_DIR}", claims), check=False)
            raise
        if claimed.strip() != b"claimed":
            if claims:
                await self._run(machine, release_command(f"{base}/{CLAIMS_DIR}", claims), check=False)
            return self._handle(spec, machine, trial_dir)
        await self._run(machine, workdir_command(trial_dir, code_folder, in_place),
                        parameter_text(spec.parameter_id, spec.parameters).encode())
        await self._run(machine, "bash -s", (launch_once_guard(trial_dir) + self.launch_script(
            spec, machine, trial_dir, code_folder, sdk_folder, claims, base)).encode())
        return self._handle(spec, machine, trial_dir)

    def _handle(self, spec: TrialSpec, machine: Machine, trial_dir: str) -> TrialHandle:
        return {"platform": self.name, "trial_id": spec.trial_id, "machine": machine.index,
                "host": machine.target.label, "trial_dir": trial_dir, "submitted_at": time.time()}

    async def poll(self, handle: TrialHandle, cursor: Cursor) -> TrialUpdate:
        machine = self.machines[int(handle["machine"])]
        offset = int(cursor.get("metrics_offset", 0))
        out = await self._run(machine, probe_command(handle["trial_dir"], offset))
        facts, data = parse_probe(out)
        if facts.get("missing"):
            return TrialUpdate(TrialStatus.FAILED, [], dict(cursor), f"trial folder {handle['trial_dir']} is gone "
                               f"from {machine.target.label}")
        exit_code = int(facts["exit"]) if facts.get("exit", "").strip().lstrip("-").isdigit() else None
        cancel = json.loads(facts["cancel"]) if facts.get("cancel") else None
        status = remote_status(exit_code, TrialStatus(cancel["status"]) if cancel else None,
                               facts.get("alive") == "1", bool(facts.get("pid")),
                               time.time() - float(handle.get("submitted_at", 0)))
        metrics, skipped = [], []
        in_long_line = bool(cursor.get("in_long_line"))
        while True:  # while the trial runs, one chunk a poll; once it ended, every byte left
            last = len(data) < READ_CHUNK
            read = read_stdout_lines(data, in_long_line=in_long_line, final=status.is_terminal and last)
            metrics += read.metrics
            skipped += read.skipped
            offset, in_long_line = offset + read.consumed, read.in_long_line
            if not status.is_terminal or last or read.consumed == 0:
                break
            data = await self._run(machine, read_command(handle["trial_dir"], offset))
        message = None
        if status in CANCEL_STATUSES and cancel:
            message = cancel["reason"]
        elif status == TrialStatus.FAILED:
            message = (f"trial command exited with code {exit_code} on {machine.target.label}" if exit_code is not None
                       else f"trial process on {machine.target.label} disappeared without an exit code")
        next_cursor: Cursor = {"metrics_offset": offset}
        if in_long_line:
            next_cursor["in_long_line"] = True
        return TrialUpdate(status, metrics, next_cursor, message, exit_code, skipped)

    async def stop(self, handle: TrialHandle, status: TrialStatus, reason: str) -> None:
        machine = self.machines[int(handle["machine"])]
        request = json.dumps({"status": status.value, "reason": reason}).encode()
        await self._run(machine, cancel_request_command(handle["trial_dir"]), request)
        await self._run(machine, kill_command(handle["trial_dir"], KILL_GRACE_SECONDS) + "; "
                        # what left the process group (setsid, double forks) carries the mark
                        + stop_marked_command(trial_mark(handle["trial_dir"]), KILL_GRACE_SECONDS), check=False)

    async def cleanup(self, experiment_id: str) -> None:
        """Remove the experiment's files from every machine (the staged code stays: another
        experiment with the same code reuses it)."""
        for machine in self.machines:
            base = await self._base(machine)
            await self._run(machine, cleanup_command(self.experiment_root(base, experiment_id)))

    def render(self, spec: TrialSpec) -> Mapping[str, Any]:
        base = f"$HOME/{BASE_DIR_NAME}"
        trial_dir = self.trial_dir(base, spec.experiment_id, spec.trial_id)
        machine = self.machines[0]
        env = self.build_env(spec, trial_dir, f"{base}/.code/<code digest>", f"{base}/.code/<sdk digest>", machine)
        return {
            "platform": "remote",
            "machines": [m.target.label for m in self.machines],
            "command": spec.command,
            "trial_directory": trial_dir,
            "environment": {k: v for k, v in sorted(env.items()) if k.startswith("NNI_") or k in (
                "CUDA_VISIBLE_DEVICES", "PYTHONUNBUFFERED")},
            "launch": self.build_command(spec, trial_dir, f"{base}/.code/<sdk digest>", machine),
            "parameter.cfg": json.loads(parameter_text(spec.parameter_id, spec.parameters)),
        }

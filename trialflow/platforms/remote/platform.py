"""NNI's ``platform: remote``: trials on machines reached over SSH, everything pulled.

Nothing on a machine ever connects back (NNI's trials stuck WAITING because
they could not reach the manager cannot happen): trialflow stages the code,
launches the trial detached, and reads status and new metric bytes over SSH.
Every shell command is a pure builder in ``remote_commands``, so what runs on a
machine is visible in ``trialflow render`` and tested without one (with hostile
values in every field: tests/security/test_quoting.py).

Machines, the shell on each and placement are in ``machines``; staging the code in
``staging``; SSH connections in ``ssh``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar

from trialflow.config.model import SharedStorageConfig
from trialflow.config.platforms import RemoteConfig
from trialflow.config.units import whole_number
from trialflow.platforms.base import (
    CANCEL_STATUSES,
    Connections,
    Cursor,
    OutputTooLarge,
    Resume,
    TrainingPlatform,
    TrialHandle,
    TrialSpec,
    TrialStatus,
    TrialUpdate,
)
from trialflow.platforms.gpus import CLAIMS_DIR, GpuRequest, GpuRequestError, attempt, release_command
from trialflow.platforms.leftovers import stop_marked_command, trial_mark
from trialflow.platforms.local import local_fault, local_status
from trialflow.platforms.remote.commands import (
    READ_CHUNK,
    archive_within,
    cancel_request_command,
    claim_command,
    cleanup_command,
    detached_command,
    kill_command,
    launch_command,
    launch_once_guard,
    launch_state_command,
    mkdir_command,
    output_archive_command,
    parse_launch_state,
    parse_probe,
    path_prefix,
    probe_command,
    read_command,
    resume_unpack_command,
    running_count_command,
    tail_command,
    take_over_command,
    trial_body,
    upload_command,
    workdir_command,
)
from trialflow.platforms.remote.endings import endings_for
from trialflow.platforms.remote.machines import (
    BASE_DIR_NAME,
    Machine,
    Shell,
    experiment_root,
    least_loaded_first,
    machines_of,
    trial_folder,
)
from trialflow.platforms.remote.staging import CodeStaging
from trialflow.trial.folder import last_line
from trialflow.trial.packing import (
    CodeDirectoryError,
    check_limits,
    collect_files,
)
from trialflow.trial.protocol import read_stdout_lines

log = logging.getLogger(__name__)
GPU_WAIT_SECONDS = 2.0
LAUNCH_GRACE_SECONDS = 60.0
#: A claim this old whose trial never launched was left by a submit that died (see submit).
CLAIM_STALE_SECONDS = 45.0
KILL_GRACE_SECONDS = 5.0
#: Seconds a finished trial's leftover processes get between SIGTERM and SIGKILL.
LEFTOVER_GRACE_SECONDS = 2.0


def _exit_code(text: str) -> int | None:
    """The exit code a remote trial's wrapper wrote (``-15`` for a signal), or None."""
    text = text.strip()
    number = whole_number(text.removeprefix("-"))
    return None if number is None else (-number if text.startswith("-") else number)


def remote_status(
    exit_code: int | None, cancel: TrialStatus | None, alive: bool, has_pid: bool, seconds_since_submit: float
) -> TrialStatus:
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


def extract_output(archive: Path, folder: Path) -> None:
    """A trial's output folder as its machine archived it, into the new ``folder``: tarfile's
    ``data`` filter refuses a member outside it, an absolute or climbing link, a device (the
    trial wrote those files: nothing in them is trusted); an empty archive is no such folder."""
    import tarfile

    folder.mkdir()
    if archive.stat().st_size:
        with tarfile.open(archive) as tar:
            tar.extractall(folder, filter="data")


def remote_fault(status: TrialStatus, exit_code: int | None) -> bool:
    """local_fault's rule; an exit code the wrapper wrote as ``-<signal>`` is a signal too."""
    return local_fault(status, 128 - exit_code if exit_code is not None and exit_code < 0 else exit_code)


class RemotePlatform(TrainingPlatform[RemoteConfig]):
    name: ClassVar[str] = "remote"
    keeps_checkpoints: ClassVar[bool] = True

    def __init__(self, config: RemoteConfig, experiment_dir: Path, connections: Connections | None = None):
        super().__init__(config, experiment_dir, connections)
        self.machines = machines_of(config.machine_list)
        self.shell = Shell(self.connections.ssh)
        self.staging = CodeStaging(self.shell)

    def use_shared_storage(self, shared: SharedStorageConfig | None) -> None:
        """NNI's sharedStorage: code already on storage the machines mount is read in place."""
        self.staging.shared = shared

    async def prepare(self, experiment_id: str) -> None:
        """Check every machine is reachable (clear errors for keys, host keys, addresses) and
        stage trialflow's SDK there; the code is staged by the first trial that needs it."""

        async def one(machine: Machine) -> None:
            base = await self.shell.base(machine)
            await self.shell.run(machine, mkdir_command(f"{experiment_root(base, experiment_id)}/trials"))
            await self.staging.sdk_on(machine)

        await asyncio.gather(*(one(m) for m in self.machines))

    async def stage_code(self, code_dir: Path, excludes: tuple[Path, ...] = ()) -> list[str]:
        """Put the code on every machine now (submit does it per machine when needed): the
        folder each reads it from."""

        async def one(machine: Machine) -> str:
            return (await self.staging.code_on(machine, Path(code_dir), excludes))[0]

        return list(await asyncio.gather(*(one(m) for m in self.machines)))

    def preflight(self, code_dir: Path, excludes: tuple[Path, ...] = ()) -> list[tuple[tuple[str | int, ...], str]]:
        """The code must exist and fit NNI's upload limits: said by validate, not the first trial."""
        if not Path(code_dir).is_dir():
            return [(("trialCodeDirectory",), f"the trial code directory {code_dir} does not exist")]
        if self.staging.shared_code_path(code_dir) is not None:
            return []  # read in place on the machines: nothing is uploaded
        try:
            check_limits(code_dir, collect_files(code_dir, excludes))
        except CodeDirectoryError as exc:
            return [(("trialCodeDirectory",), str(exc))]
        return []

    # -- placement ------------------------------------------------------------------------

    async def _running_on(self, machine: Machine, experiment_id: str) -> int:
        base = await self.shell.base(machine)
        out = await self.shell.run(
            machine, running_count_command(f"{experiment_root(base, experiment_id)}/trials"), check=False
        )
        try:
            return int(out.strip() or 0)
        except ValueError:
            return 0

    async def _order(self, spec: TrialSpec) -> list[Machine]:
        if len(self.machines) == 1:
            return list(self.machines)
        loads = await asyncio.gather(*(self._running_on(m, spec.experiment_id) for m in self.machines))
        return least_loaded_first(self.machines, loads, spec.sequence)

    # -- trials ---------------------------------------------------------------------------

    def build_env(
        self,
        spec: TrialSpec,
        trial_dir: str,
        code_dir: str,
        sdk_dir: str,
        machine: Machine,
        gpus: list[int] | None = None,
    ) -> dict[str, str]:
        return spec.environment("remote", trial_dir, code_dir, gpu_indices=gpus or [], base={})

    def build_command(self, spec: TrialSpec, trial_dir: str, sdk_dir: str, machine: Machine, release: str = "") -> str:
        """What the detached wrapper runs; after the trial, the processes it left behind are
        stopped and its GPU claims released."""
        leftovers = stop_marked_command(trial_mark(trial_dir), LEFTOVER_GRACE_SECONDS)
        return trial_body(trial_dir, spec.command, sdk_dir, machine.config.python_path, [leftovers, release])

    def launch_script(
        self,
        spec: TrialSpec,
        machine: Machine,
        trial_dir: str,
        code_dir: str,
        sdk_dir: str,
        claims: list[tuple[int, int]] | None = None,
        base: str = "",
    ) -> str:
        env = self.build_env(spec, trial_dir, code_dir, sdk_dir, machine, [i for i, _ in claims or []])
        release = release_command(f"{base}/{CLAIMS_DIR}", claims) if claims else ""
        return launch_command(self.build_command(spec, trial_dir, sdk_dir, machine, release), trial_dir, env)

    async def _claim_gpus(
        self, spec: TrialSpec, trial_for: Callable[[Machine], Awaitable[str]], order: list[Machine]
    ) -> tuple[Machine, list[tuple[int, int]]]:
        """The first machine (in placement order) with trialGpuNumber free GPUs, and the claims;
        waits while every machine is full, refuses a request no machine can ever take."""
        refusals: list[str] = []
        waited = False
        while True:
            for machine in order:
                base = await self.shell.base(machine)

                async def run(command: str, machine: Machine = machine) -> str:
                    return (
                        await self.shell.run(machine, path_prefix(machine.config.python_path) + command, check=False)
                    ).decode()

                try:
                    request = GpuRequest(
                        claims_dir=f"{base}/{CLAIMS_DIR}",
                        need=spec.gpu_number,
                        per_gpu=machine.config.max_trial_number_per_gpu,
                        gpu_indices=machine.config.gpu_indices,
                        use_active_gpu=machine.config.use_active_gpu,
                        owner=await trial_for(machine),
                        where=machine.target.label,
                    )
                    picks = await attempt(run, request)
                except GpuRequestError as exc:
                    refusals.append(str(exc))
                    continue
                if picks is not None:
                    return machine, picks
            if len(refusals) >= len(order):
                raise GpuRequestError("; ".join(dict.fromkeys(refusals)))
            refusals.clear()
            if not waited:
                log.info(
                    "Trial %s waits for %d free GPU(s) on %d machine(s)", spec.trial_id, spec.gpu_number, len(order)
                )
            waited = True
            await asyncio.sleep(GPU_WAIT_SECONDS)

    async def submit(self, spec: TrialSpec) -> TrialHandle:
        for machine in self.machines:  # re-attach: the trial may already run on any machine
            trial_dir = trial_folder(await self.shell.base(machine), spec.experiment_id, spec.trial_id)
            state = await self._launch_state(machine, trial_dir)
            if state == "launched":
                return self._handle(spec, machine, trial_dir)
            if state == "stale":
                # The submit that claimed this folder died before launching (its worker was
                # killed): this one launches the trial there, unless another taker won.
                log.warning("Trial %s: taking over a launch abandoned on %s", spec.trial_id, machine.target.label)
                if (
                    await self.shell.run(machine, take_over_command(trial_dir, CLAIM_STALE_SECONDS))
                ).strip() != b"claimed":
                    return self._handle(spec, machine, trial_dir)
                return await self._launch_on(spec, machine, [machine], claimed=True)
        return await self._launch_on(spec, None, await self._order(spec), claimed=False)

    async def _launch_state(self, machine: Machine, trial_dir: str) -> str:
        """``launched``, ``none``, or ``stale`` (claimed CLAIM_STALE_SECONDS ago and never
        launched); a younger claim is a submit still launching, which this one waits out, for
        no longer than the claim could take to go stale (a claim dated in the machine's future
        never does: take_over_command then finds it young and leaves it)."""
        deadline = time.monotonic() + CLAIM_STALE_SECONDS + 15
        while True:
            state, age = parse_launch_state((await self.shell.run(machine, launch_state_command(trial_dir))).decode())
            if state != "claimed":
                return state
            if age >= CLAIM_STALE_SECONDS or time.monotonic() > deadline:
                return "stale"
            await asyncio.sleep(1.0)

    async def _launch_on(
        self, spec: TrialSpec, machine: Machine | None, order: list[Machine], claimed: bool, attempt: int = 0
    ) -> TrialHandle:
        """Claim GPUs and the trial folder (unless ``claimed``), write the working directory,
        launch. ``machine`` None: the first of ``order`` (with free GPUs when the trial needs them).
        ``attempt``: a restart's, in its own folder."""
        claims: list[tuple[int, int]] = []
        if spec.gpu_number > 0:

            async def trial_for(m: Machine) -> str:
                return trial_folder(await self.shell.base(m), spec.experiment_id, spec.trial_id, attempt)

            machine, claims = await self._claim_gpus(spec, trial_for, order)
        elif machine is None:
            machine = order[0]
        base = await self.shell.base(machine)
        trial_dir = trial_folder(base, spec.experiment_id, spec.trial_id, attempt)
        try:
            code_folder, in_place = await self.staging.code_on(machine, spec.code_dir, spec.code_excludes)
            sdk_folder = await self.staging.sdk_on(machine)
            won = claimed or (await self.shell.run(machine, claim_command(trial_dir))).strip() == b"claimed"
        except BaseException:
            if claims:
                await self.shell.run(machine, release_command(f"{base}/{CLAIMS_DIR}", claims), check=False)
            raise
        if not won:
            if claims:
                await self.shell.run(machine, release_command(f"{base}/{CLAIMS_DIR}", claims), check=False)
            return self._handle(spec, machine, trial_dir)
        if spec.start_from is not None and not spec.resumes:
            # a PBT parent's checkpoint, uploaded as a restart's is, before the launch
            folder = f"{trial_dir}/resume"
            await self._upload_resume(machine, trial_dir, folder, spec.start_from)
            spec = spec.resuming(folder, spec.start_from)
        await self.shell.run(
            machine,
            workdir_command(trial_dir, code_folder, in_place),
            spec.parameter_cfg(trial_dir).encode(),
        )
        await self.shell.run(
            machine,
            "bash -s",
            (
                launch_once_guard(trial_dir)
                + self.launch_script(spec, machine, trial_dir, code_folder, sdk_folder, claims, base)
            ).encode(),
        )
        return self._handle(spec, machine, trial_dir)

    def _handle(self, spec: TrialSpec, machine: Machine, trial_dir: str) -> TrialHandle:
        return {
            "platform": self.name,
            "trial_id": spec.trial_id,
            "machine": machine.index,
            "host": machine.target.label,
            "trial_dir": trial_dir,
            "submitted_at": time.time(),
        }

    async def poll(self, handle: TrialHandle, cursor: Cursor) -> TrialUpdate:
        machine = self.machines[int(handle["machine"])]
        offset = int(cursor.get("metrics_offset", 0))
        out = await self.shell.run(machine, probe_command(handle["trial_dir"], offset))
        facts, data = parse_probe(out)
        if facts.get("missing"):
            return TrialUpdate(
                TrialStatus.FAILED,
                [],
                dict(cursor),
                f"trial folder {handle['trial_dir']} is gone from {machine.target.label}",
            )
        exit_code = _exit_code(facts.get("exit", ""))
        cancel = json.loads(facts["cancel"]) if facts.get("cancel") else None
        status = remote_status(
            exit_code,
            TrialStatus(cancel["status"]) if cancel else None,
            facts.get("alive") == "1",
            bool(facts.get("pid")),
            time.time() - float(handle.get("submitted_at", 0)),
        )
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
            data = await self.shell.run(machine, read_command(handle["trial_dir"], offset))
        message = None
        if status in CANCEL_STATUSES and cancel:
            message = cancel["reason"]
        elif status == TrialStatus.FAILED:
            message = (
                f"trial command exited with code {exit_code} on {machine.target.label}"
                if exit_code is not None
                else f"trial process on {machine.target.label} disappeared without an exit code"
            )
            said = last_line(await self.shell.run(machine, tail_command(handle["trial_dir"], "stderr")))
            if said:
                message += f": {said}"
        next_cursor: Cursor = {"metrics_offset": offset}
        if in_long_line:
            next_cursor["in_long_line"] = True
        return TrialUpdate(status, metrics, next_cursor, message, exit_code, skipped)

    # -- checkpoints ------------------------------------------------------------------------

    async def fetch_output(
        self, handle: TrialHandle, relative: str, scratch: Path, max_bytes: int | None = None
    ) -> Path:
        """The output folder ``relative`` copied from the machine: a tar archive streamed into a file
        here, no larger than ``max_bytes`` allows (an OutputTooLarge past it), then extracted with
        tarfile's ``data`` filter (no path outside, no device, no link leading out; the keeper
        then refuses any link at all)."""
        machine = self.machines[int(handle["machine"])]
        archive = scratch / "checkpoint.tar"
        await self.shell.run(
            machine, output_archive_command(handle["trial_dir"], relative, max_bytes), stdout_to=archive
        )
        if not archive_within(archive.stat().st_size if archive.exists() else 0, max_bytes):
            archive.unlink()
            raise OutputTooLarge(f"{relative} on {machine.target.label} holds more than {max_bytes} bytes: not copied")
        folder = scratch / "trial"
        extract_output(archive, folder)
        archive.unlink()
        return folder

    def ended_by_fault(self, update: TrialUpdate) -> bool:
        """As on local (a signal, or the wrapper gone without an exit code: the machine
        rebooted, the process group killed), and a trial folder gone from its machine."""
        return remote_fault(update.status, update.exit_code)

    async def restart(self, handle: TrialHandle, spec: TrialSpec, attempt: int, resume: Resume | None) -> TrialHandle:
        """On the same machine, in a folder of its own (``<trial id>.attempt-<n>``): the
        checkpoint fetched from the store is uploaded there and unpacked as ``resume`` first,
        then the trial launched as submit launches it (its atomic claim: of two restarters one
        launches). Its output starts afresh, so the follow cursor does."""
        machine = self.machines[int(handle["machine"])]
        base = await self.shell.base(machine)
        trial_dir = trial_folder(base, spec.experiment_id, spec.trial_id, attempt)
        state = await self._launch_state(machine, trial_dir)
        if state == "launched":
            return {**self._handle(spec, machine, trial_dir), "attempt": attempt}
        if resume is not None:
            folder = f"{trial_dir}/resume"
            await self._upload_resume(machine, trial_dir, folder, resume)
            spec = spec.resuming(folder, resume)
        launched = await self._launch_on(spec, machine, [machine], claimed=False, attempt=attempt)
        return {**launched, "attempt": attempt}

    async def _upload_resume(self, machine: Machine, trial_dir: str, folder: str, resume: Resume) -> None:
        import tarfile
        import tempfile

        with tempfile.TemporaryDirectory(prefix="trialflow-resume-") as scratch:
            fetched = await asyncio.to_thread(resume.fetch, Path(scratch) / "checkpoint")
            archive = Path(scratch) / "checkpoint.tar"

            def pack() -> None:  # the fetched folder holds the manifest's regular files only
                with tarfile.open(archive, "w") as tar:
                    tar.add(fetched, arcname=".")

            await asyncio.to_thread(pack)
            upload = f"{trial_dir}.resume-{time.time_ns()}.tar"

            async def chunks() -> AsyncGenerator[bytes, None]:
                with open(archive, "rb") as fh:
                    while chunk := fh.read(1024 * 1024):
                        yield chunk

            await self.shell.run(machine, upload_command(str(Path(trial_dir).parent), upload), chunks)
            await self.shell.run(machine, resume_unpack_command(folder, upload))

    async def wait_for_change(self, handle: TrialHandle, cursor: Cursor, timeout: float) -> None:
        """The follow loop's pause, ended as soon as the trial's exit code is written: one check
        per machine for every trial this process follows there (trialflow.platforms.remote.endings)."""
        machine = self.machines[int(handle["machine"])]

        async def run(command: str) -> bytes:
            return await self.shell.run(machine, command)

        await endings_for(machine.target, run).wait(handle["trial_dir"], timeout)

    async def stop(self, handle: TrialHandle, status: TrialStatus, reason: str) -> None:
        machine = self.machines[int(handle["machine"])]
        request = json.dumps({"status": status.value, "reason": reason}).encode()
        await self.shell.run(machine, cancel_request_command(handle["trial_dir"]), request)
        # Detached on the machine: the KILL after the grace happens even if this process (a
        # task's on_kill, SIGKILLed by Airflow 5 s after its SIGTERM) and its SSH session end.
        await self.shell.run(
            machine,
            detached_command(
                # the group and what left it (setsid, double forks: it carries the mark), at once
                f"( {kill_command(handle['trial_dir'], KILL_GRACE_SECONDS)} ) & "
                + stop_marked_command(trial_mark(handle["trial_dir"]), KILL_GRACE_SECONDS)
                + "; wait"
            ),
            check=False,
        )

    async def cleanup(self, experiment_id: str) -> None:
        """Remove the experiment's files from every machine (the staged code stays: another
        experiment with the same code reuses it)."""
        for machine in self.machines:
            base = await self.shell.base(machine)
            await self.shell.run(machine, cleanup_command(experiment_root(base, experiment_id)))

    def render(self, spec: TrialSpec) -> Mapping[str, Any]:
        base = f"$HOME/{BASE_DIR_NAME}"
        trial_dir = trial_folder(base, spec.experiment_id, spec.trial_id)
        machine = self.machines[0]
        env = self.build_env(spec, trial_dir, f"{base}/.code/<code digest>", f"{base}/.code/<sdk digest>", machine)
        return {
            "platform": "remote",
            "machines": [m.target.label for m in self.machines],
            "command": spec.command,
            "trial_directory": trial_dir,
            "environment": {
                k: v
                for k, v in sorted(env.items())
                if k.startswith("NNI_") or k in ("CUDA_VISIBLE_DEVICES", "PYTHONUNBUFFERED")
            },
            "launch": self.build_command(spec, trial_dir, f"{base}/.code/<sdk digest>", machine),
            "parameter.cfg": json.loads(spec.parameter_cfg(trial_dir)),
        }

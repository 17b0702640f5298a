"""Trials as local processes, the way NNI's local training service ran them, but sturdier.

Each trial gets ``<experiment dir>/trials/<trial id>/`` as NNI_SYS_DIR and runs
its command in the code directory. A small wrapper script (NNI's run.sh)
records its own pid first and writes the exit code atomically last, so the
state on disk is always one of: launching, running, exited(rc), and a poller,
a retried task or a restarted triggerer reads the same answer. The process
runs in its own session with stdio to files, so it survives the Airflow task
that started it (the task defers) and never holds the task supervisor's pipes.
Cancel kills the whole process tree, not just the shell (NNI 3.0 did only
that).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shlex
import subprocess
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import psutil
import tenacity

from trialflow.config.platforms import LocalConfig
from trialflow.platforms.base import (
    CANCEL_STATUSES,
    Cursor,
    Resume,
    TrainingPlatform,
    TrialHandle,
    TrialSpec,
    TrialStatus,
    TrialUpdate,
)
from trialflow.platforms.gpus import CLAIMS_DIR, GpuRequest, acquire, release_command
from trialflow.platforms.hosts import check_host, this_host
from trialflow.platforms.leftovers import MARK_VAR, stop_marked_command, stop_trial_command, trial_mark
from trialflow.platforms.mounted import read_framed_file, restart_lock, resume_in_folder
from trialflow.trial.folder import TrialFileRefused, last_line, read_in_folder, read_small, tail_in_folder
from trialflow.trial.protocol import (
    METRICS_FILE,
    complete_line,
    read_state_file,
    write_parameter_file,
)
from trialflow.trial.wire import STATE_FILE

#: The folder holding trialflow's ``nni`` stand-in (trialflow/trial/shim).
NNI_SHIM = Path(__file__).resolve().parent.parent / "trial" / "shim"
log = logging.getLogger(__name__)
CONTROL_DIR = ".trialflow"
PID_FILE = f"{CONTROL_DIR}/pid"
CANCEL_FILE = f"{CONTROL_DIR}/cancel"
LAUNCH_FILE = f"{CONTROL_DIR}/launching"
#: Seconds between SIGTERM and SIGKILL when cancelling, as NNI's local mode.
KILL_GRACE_SECONDS = 5.0
#: How long past the grace a stop waits for its stopper to finish (it goes on if the asker dies).
STOP_WAIT_MARGIN = 2.0
#: Seconds a finished trial's leftover processes get between SIGTERM and SIGKILL.
LEFTOVER_GRACE_SECONDS = 2.0
#: How long a re-attaching submit waits for a launching wrapper to record its pid.
LAUNCH_WAIT_SECONDS = 10.0
#: A process created this long after the recorded start reused the pid (clock granularity).
PID_REUSE_TOLERANCE = 2.0
#: How late after its creation a wrapper may record its start time and still be that process.
MAX_START_LAG = 300.0

# The wrapper: pid (with its start time, against pid reuse, and its host: only that one can
# see the process, trialflow.platforms.hosts) first, exit code last. Each is one line written by one
# echo, and read only once it ends with its newline (complete_line), so a reader never takes a
# half-written file for the whole: no temporary file and rename (two mv and a date were three
# processes started on every trial's way to its exit code).
_WRAPPER = """#!/bin/bash
ctl={ctl}
echo "$$ $EPOCHREALTIME $HOSTNAME" > "$ctl/pid"
cd {code_dir} || {{ echo "cannot cd to the code directory {code_dir}" >> {sys_dir}/stderr; rc=127; }}
if [ -z "$rc" ]; then
  bash -c {command} > {sys_dir}/stdout 2> {sys_dir}/stderr < /dev/null
  rc=$?
fi
{leftovers}
{release}
now=${{EPOCHREALTIME/[.,]/}}
echo "$rc ${{now:0:13}}" > {sys_dir}/.nni/state
"""


def local_fault(status: TrialStatus, exit_code: int | None) -> bool:
    """A failed local trial ended by a fault, not by its own exit: its wrapper gone without an
    exit code (the machine rebooted, the process group killed) or its command killed by a
    signal (128 + the signal: the OOM killer's SIGKILL is 137). A stop trialflow asked for is
    never FAILED (its cancel file makes it a cancel status)."""
    return status == TrialStatus.FAILED and (exit_code is None or exit_code > 128)


#: Where each ended attempt's control files, exit code and logs are kept, and where a
#: restart's checkpoint is fetched to (both in the trial's folder, beside its output).
ATTEMPT_DIR = ".trialflow-attempt-{}"
_ATTEMPT_FILES = (CONTROL_DIR, STATE_FILE, "stdout", "stderr")


def _archive_attempt(sys_dir: Path, ended: int) -> None:
    """Move attempt ``ended``'s files aside, as they lay in the trial's folder (once: a second
    restarter finds them moved)."""
    archive = sys_dir / ATTEMPT_DIR.format(ended)
    with restart_lock(sys_dir):
        if archive.exists():
            return
        partial = archive.with_name(archive.name + ".partial")
        for name in _ATTEMPT_FILES:
            source = sys_dir / name
            if source.exists() or source.is_symlink():
                (partial / name).parent.mkdir(parents=True, exist_ok=True)
                os.replace(source, partial / name)
        partial.mkdir(exist_ok=True)
        os.replace(partial, archive)


def _last_stderr_line(sys_dir: Path) -> str | None:
    """The failed trial's last word on stderr (its exception), read safely from its folder."""
    try:
        data, _ = tail_in_folder(sys_dir, "stderr", 4096)
    except OSError:
        return None
    return last_line(data)


def process_alive(pid: int, started: float | None = None) -> bool:
    """True if ``pid`` runs and is not a zombie; with ``started`` (epoch seconds the wrapper
    recorded), also that it is the same process and not a later one that reused the pid."""
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        if started is None:
            return True
        # The wrapper records its start time a moment after the process was created; on a
        # loaded machine (64 trials starting on 2 cores) that moment can be seconds. A pid
        # reused by a later process was created *after* the recorded time.
        lag = started - proc.create_time()
        return -PID_REUSE_TOLERANCE <= lag <= MAX_START_LAG
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True


#: exit_watch's answer for a wrapper that has already ended (gone, a zombie, or its pid reused):
#: the next poll reports how the trial ended, so there is nothing to wait for.
ENDED = -1


def exit_watch(handle: TrialHandle) -> int | None:
    """A pidfd of the trial's wrapper, readable once it has exited; ENDED when it already has;
    None when it cannot be watched from here: a trial of another host, or no pidfd (Linux <
    5.3, another PID namespace)."""
    pid = handle.get("pid")
    if not pid or handle.get("host", this_host()) != this_host() or not hasattr(os, "pidfd_open"):
        return None
    try:
        watch = os.pidfd_open(int(pid))
    except ProcessLookupError:
        return ENDED
    except OSError:
        return None
    # Checked after the pidfd is open, so the process it names is the one that was checked.
    if not process_alive(int(pid), handle.get("started")):
        os.close(watch)
        return ENDED
    return watch


def _tree(pid: int) -> list[int]:
    """``pid`` and every process below it (children that started their own session too)."""
    try:
        return [pid] + [child.pid for child in psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return [pid]


def local_status(exit_code: int | None, cancel: TrialStatus | None, alive: bool) -> TrialStatus:
    """The whole local status map, from the three facts on disk and in /proc.

    | exit code | cancel requested | process alive | status            |
    |-----------|------------------|---------------|-------------------|
    | 0         | any              | any           | SUCCEEDED (it finished before the cancel landed) |
    | any       | yes              | yes           | RUNNING (stopping)|
    | any       | yes              | no            | the cancel status |
    | != 0      | no               | any           | FAILED            |
    | none      | no               | yes           | RUNNING           |
    | none      | no               | no            | FAILED (vanished) |
    """
    if exit_code == 0:
        return TrialStatus.SUCCEEDED
    if cancel is not None:
        return TrialStatus.RUNNING if alive else cancel
    if exit_code is not None:
        return TrialStatus.FAILED
    return TrialStatus.RUNNING if alive else TrialStatus.FAILED


class LocalPlatform(TrainingPlatform[LocalConfig]):
    """NNI's ``platform: local``. Trials run on the machine of the worker that submits them;
    the triggerer that follows them must run on the same machine (as with NNI's manager)."""

    name: ClassVar[str] = "local"
    log_files: ClassVar[tuple[str, ...]] = ("stdout", "stderr")
    keeps_checkpoints: ClassVar[bool] = True
    restart_keeps_output: ClassVar[bool] = True

    # -- layout ---------------------------------------------------------------------------

    def trial_dir(self, trial_id: str) -> Path:
        return self.experiment_dir / "trials" / trial_id

    @property
    def claims_dir(self) -> Path:
        """GPU claims of every experiment under the same working directory (one machine)."""
        return self.experiment_dir.parent / CLAIMS_DIR

    async def prepare(self, experiment_id: str) -> None:
        (self.experiment_dir / "trials").mkdir(parents=True, exist_ok=True)

    # cleanup: the default (nothing). Local trial folders are the results: kept, as NNI keeps them.

    def preflight(self, code_dir: Path, excludes: tuple[Path, ...] = ()) -> list[tuple[tuple[str | int, ...], str]]:
        if not Path(code_dir).is_dir():
            return [(("trialCodeDirectory",), f"the trial code directory {code_dir} does not exist")]
        return []

    # -- pure builders --------------------------------------------------------------------

    def build_env(self, spec: TrialSpec) -> dict[str, str]:
        """The trial's environment (subclasses extend it); submit adds the claimed GPUs.

        ``import nni`` works where NNI is not installed: the SDK's ``nni`` stand-in goes last on
        PYTHONPATH (it hands over to an installed nni, and the user's own entries come first)."""
        env = spec.environment("local", str(self.trial_dir(spec.trial_id)), str(spec.code_dir), gpu_indices=[])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), str(NNI_SHIM)) if p)
        return env

    def build_wrapper(self, spec: TrialSpec, claims: list[tuple[int, int]] | None = None) -> str:
        """The trial's launcher; it releases the trial's GPU claims when the trial ends, before
        the exit code is written (whoever sees the trial ended sees its GPUs free)."""
        sys_dir = self.trial_dir(spec.trial_id)
        release = release_command(str(self.claims_dir), claims) if claims else ""
        return _WRAPPER.format(
            ctl=shlex.quote(str(sys_dir / CONTROL_DIR)),
            code_dir=shlex.quote(str(spec.code_dir)),
            sys_dir=shlex.quote(str(sys_dir)),
            command=shlex.quote(spec.command),
            release=release,
            leftovers=stop_marked_command(trial_mark(str(sys_dir)), LEFTOVER_GRACE_SECONDS),
        )

    async def claim_gpus(self, spec: TrialSpec) -> list[tuple[int, int]]:
        """Wait for and claim trialGpuNumber GPUs of this machine (none when it is 0)."""
        if spec.gpu_number <= 0:
            return []

        async def run(command: str) -> str:
            proc = await asyncio.create_subprocess_exec(
                "bash", "-c", command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
            )
            out, _ = await proc.communicate()
            return out.decode("utf-8", "replace")

        request = GpuRequest(
            claims_dir=str(self.claims_dir),
            need=spec.gpu_number,
            per_gpu=self.config.max_trial_number_per_gpu,
            gpu_indices=self.config.gpu_indices,
            use_active_gpu=bool(self.config.use_active_gpu),
            owner=str(self.trial_dir(spec.trial_id)),
            where="this machine",
        )
        return await acquire(run, request, on_wait=log.info)

    def render(self, spec: TrialSpec) -> Mapping[str, Any]:
        env = self.build_env(spec)
        if spec.gpu_number > 0:
            env["CUDA_VISIBLE_DEVICES"] = f"<{spec.gpu_number} GPU(s) claimed at launch>"
        nni_env = {
            k: v
            for k, v in sorted(env.items())
            if k.startswith("NNI_") or k in ("CUDA_VISIBLE_DEVICES", "PYTHONUNBUFFERED")
        }
        return {
            "platform": "local",
            "command": spec.command,
            "working_directory": str(spec.code_dir),
            "trial_directory": str(self.trial_dir(spec.trial_id)),
            "environment": nni_env,
            "parameter.cfg": json.loads(spec.parameter_cfg(str(self.trial_dir(spec.trial_id)))),
        }

    # -- contract -------------------------------------------------------------------------

    async def submit(self, spec: TrialSpec) -> TrialHandle:
        sys_dir = self.trial_dir(spec.trial_id)
        handle: TrialHandle = {"platform": self.name, "trial_id": spec.trial_id, "trial_dir": str(sys_dir)}
        existing = self._reattach(sys_dir, handle)
        if existing is not None:
            return existing
        if not spec.code_dir.is_dir():
            raise FileNotFoundError(f"trialCodeDirectory {spec.code_dir} does not exist")
        (sys_dir / ".nni").mkdir(parents=True, exist_ok=True)
        (sys_dir / CONTROL_DIR).mkdir(exist_ok=True)
        if spec.start_from is not None and not spec.resumes:
            # a PBT parent's checkpoint, fetched as a restart's is (attempt 0: the first launch)
            spec = await asyncio.to_thread(resume_in_folder, spec, sys_dir, str(sys_dir), 0, spec.start_from)
        claims = await self.claim_gpus(spec)  # may wait for free GPUs; nothing is marked meanwhile
        # The launch waits (up to LAUNCH_WAIT_SECONDS) for the wrapper's pid: off the event loop.
        return await asyncio.to_thread(self._launch, spec, sys_dir, handle, claims)

    def _launch(
        self, spec: TrialSpec, sys_dir: Path, handle: TrialHandle, claims: list[tuple[int, int]]
    ) -> TrialHandle:
        try:
            if not self._mark_launch(sys_dir):
                existing = self._reattach(sys_dir, handle, wait=True)
                if existing is not None:
                    self._release(claims)
                    return existing
                raise RuntimeError(f"trial {spec.trial_id}: another launch is in progress but recorded no pid")
            try:
                parameters = spec.parameters_at(str(sys_dir))
                write_parameter_file(sys_dir, spec.parameter_id, parameters, source=spec.parameter_source)
                wrapper = sys_dir / CONTROL_DIR / "run.sh"
                wrapper.write_text(self.build_wrapper(spec, claims))
                env = self.build_env(spec)
                env["CUDA_VISIBLE_DEVICES"] = ",".join(str(index) for index, _ in claims)
                subprocess.Popen(
                    ["bash", str(wrapper)],
                    env=env,
                    cwd=str(sys_dir),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,
                    close_fds=True,
                )
            except BaseException:
                (sys_dir / LAUNCH_FILE).unlink(missing_ok=True)  # a retry may launch again
                raise
        except BaseException:
            self._release(claims)
            raise
        found = self._reattach(sys_dir, handle, wait=True)
        if found is None:
            raise RuntimeError(f"trial {spec.trial_id}: the launcher did not start (see {sys_dir}/stderr)")
        return found

    def _mark_launch(self, sys_dir: Path) -> bool:
        """True if this submit may launch (O_EXCL: of two racing submits for one trial id, only
        one launches). A marker left by a submit that died before its launcher recorded a pid
        is taken over once it is older than LAUNCH_WAIT_SECONDS."""
        marker = sys_dir / LAUNCH_FILE
        for _ in range(2):
            try:
                os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
                return True
            except FileExistsError:
                if self._reattach(sys_dir, {"platform": self.name}, wait=True) is not None:
                    return False
                try:
                    if time.time() - marker.stat().st_mtime < LAUNCH_WAIT_SECONDS:
                        return False
                    marker.unlink()
                except FileNotFoundError:
                    pass
        return False

    def _release(self, claims: list[tuple[int, int]]) -> None:
        if claims:
            subprocess.run(["bash", "-c", release_command(str(self.claims_dir), claims)], check=False)

    def _reattach(self, sys_dir: Path, handle: TrialHandle, wait: bool = False) -> TrialHandle | None:
        """The handle of a trial already launched under this id, or None if there is none."""
        deadline = time.monotonic() + (LAUNCH_WAIT_SECONDS if wait else 0)
        pause = 0.002  # a wrapper records its pid a few ms after it starts: look soon, then less often
        while True:
            try:
                pid_text = complete_line(read_in_folder(sys_dir, PID_FILE, 0, 4096).decode(errors="replace")).split()
            except TrialFileRefused as exc:
                pid_text = [str(exc)]  # not the wrapper's line: said below, never taken for 'not launched'

            if pid_text:
                try:
                    pid = int(pid_text[0])
                    started = float(pid_text[1]) if len(pid_text) > 1 and pid_text[1] else None
                except ValueError:
                    # In the trial's output folder, where its own code writes too. Not a launch
                    # to ignore (a second launch would run the trial twice): say what is there.
                    raise RuntimeError(
                        f"{sys_dir / PID_FILE} holds {' '.join(pid_text)[:80]!r}, not the trial wrapper's "
                        "'<pid> <start time> <host>' line (did the trial's code write there?)"
                    ) from None
                host = pid_text[2] if len(pid_text) > 2 else this_host()  # a launch before hosts were kept
                return {**handle, "pid": pid, "started": started, "host": host}
            if not (sys_dir / LAUNCH_FILE).exists() and not wait:
                return None
            if time.monotonic() >= deadline:
                return None
            time.sleep(pause)
            pause = min(pause * 2, 0.05)

    def status(self, handle: TrialHandle) -> tuple[TrialStatus, int | None, str | None]:
        check_host(handle.get("trial_id", ""), handle)  # elsewhere its pid is another process, or none
        sys_dir = Path(handle["trial_dir"])
        # Liveness before the exit code: the wrapper writes its exit code and then ends, so a
        # wrapper found gone has written it. Read the other way round, a trial ending between
        # the two reads looked "vanished" (seen once in 64 trials on a loaded machine).
        alive = process_alive(handle["pid"], handle.get("started"))
        exit_code = read_state_file(sys_dir)
        cancel = self._cancel_request(sys_dir)
        status = local_status(exit_code, TrialStatus(cancel["status"]) if cancel else None, alive)
        if status == TrialStatus.RUNNING:
            message = f"stopping: {cancel['reason']}" if cancel else None
        elif cancel and status in CANCEL_STATUSES:
            message = cancel["reason"]
        elif status == TrialStatus.FAILED:
            message = (
                f"trial command exited with code {exit_code}"
                if exit_code is not None
                else "trial process disappeared without an exit code (killed?)"
            )
            said = _last_stderr_line(sys_dir)
            if said:
                message += f": {said}"
        else:
            message = None
        return status, exit_code, message

    async def wait_for_change(self, handle: TrialHandle, cursor: Cursor, timeout: float) -> None:
        """Sleep until the next poll, or until the trial's wrapper exits, whichever comes first:
        a pidfd becomes readable when its process ends, so a trial's end is seen at once, as a
        BashOperator sees its child's, instead of up to a poll interval later. Any process of
        this host can be watched this way (the worker that launched it, or a triggerer beside
        it); where a pidfd cannot be had (another host's trial, an old kernel), it sleeps."""
        watch = exit_watch(handle)
        if watch == ENDED:
            return
        if watch is None:
            await asyncio.sleep(timeout)
            return
        loop = asyncio.get_running_loop()
        ended: asyncio.Future[None] = loop.create_future()

        def exited() -> None:
            if not ended.done():
                ended.set_result(None)

        try:
            loop.add_reader(watch, exited)
        except (NotImplementedError, ValueError, OSError):  # a loop that cannot watch fds
            os.close(watch)
            await asyncio.sleep(timeout)
            return
        try:
            await asyncio.wait_for(ended, timeout)
        except TimeoutError:
            pass
        finally:
            loop.remove_reader(watch)
            os.close(watch)

    async def poll(self, handle: TrialHandle, cursor: Cursor) -> TrialUpdate:
        # Status first, then metrics: a trial that just ended has written its last metric, and
        # then every byte left is read (not one chunk) with nothing kept back for later.
        status, exit_code, message = self.status(handle)
        metrics, offset, skipped = self.read_metrics(
            handle, int(cursor.get("metrics_offset", 0)), final=status.is_terminal
        )
        return TrialUpdate(status, metrics, {"metrics_offset": offset}, message, exit_code, skipped)

    def read_metrics(self, handle: TrialHandle, offset: int, final: bool = False) -> tuple[list, int, list[str]]:
        """New metrics from ``offset``: one chunk while the trial runs, everything once it ended."""
        return read_framed_file(Path(handle["trial_dir"]), METRICS_FILE, offset, final)

    # -- checkpoints ------------------------------------------------------------------------

    async def fetch_output(
        self, handle: TrialHandle, relative: str, scratch: Path, max_bytes: int | None = None
    ) -> Path:
        """The trial's own folder: Airflow's machine is the trial's, so the keeper reads it in
        place (without following a symlink, trialflow.trial.folder)."""
        return Path(handle["trial_dir"])

    def ended_by_fault(self, update: TrialUpdate) -> bool:
        return local_fault(update.status, update.exit_code)

    async def restart(self, handle: TrialHandle, spec: TrialSpec, attempt: int, resume: Resume | None) -> TrialHandle:
        """The ended attempt's control files, exit code and logs move to
        ``.trialflow-attempt-<n>`` (under a lock: of two restarters one moves them, the other
        finds them moved), the checkpoint is fetched from the store into
        ``.trialflow-resume/<attempt>``, and the trial is submitted again: submit's own launch
        marker lets exactly one of them launch. Its metrics file stays, so the follow cursor
        goes on where it was."""
        check_host(handle.get("trial_id", ""), handle)
        sys_dir = Path(handle["trial_dir"])
        if resume is not None:
            spec = await asyncio.to_thread(resume_in_folder, spec, sys_dir, str(sys_dir), attempt, resume)
        await asyncio.to_thread(_archive_attempt, sys_dir, attempt - 1)
        started = await self.submit(spec)
        return {**started, "attempt": attempt}

    def _cancel_request(self, sys_dir: Path) -> dict[str, Any] | None:
        try:
            return json.loads(read_small(sys_dir, CANCEL_FILE) or "null")
        except ValueError:
            return None

    def _write_cancel(self, sys_dir: Path, status: TrialStatus, reason: str) -> None:
        """The cancel request, written whole (a temporary file, then a rename). A restart may
        move the ended attempt's control folder away at any moment, with the temporary file in
        it (seen once in a full run: the rename found it gone): the request is then written
        again, into the new attempt's folder, a bounded number of times."""
        for attempt in tenacity.Retrying(
            retry=tenacity.retry_if_exception_type(FileNotFoundError),
            stop=tenacity.stop_after_attempt(3),
            reraise=True,
        ):
            with attempt:
                (sys_dir / CONTROL_DIR).mkdir(exist_ok=True)
                # a name of its own: two stops of one trial at once (its follower and a
                # reconciler) shared one temporary file, and the second's rename found it gone
                tmp = sys_dir / f"{CANCEL_FILE}.{os.getpid()}.{threading.get_ident()}.tmp"
                tmp.write_text(json.dumps({"status": status.value, "reason": reason}))
                os.replace(tmp, sys_dir / CANCEL_FILE)

    async def stop(self, handle: TrialHandle, status: TrialStatus, reason: str) -> None:
        # The grace period between TERM and KILL is waited for off the event loop.
        await asyncio.to_thread(self._stop, handle, status, reason)

    def _stop(self, handle: TrialHandle, status: TrialStatus, reason: str) -> None:
        """TERM the whole tree and what left it, KILL what is left after the grace period.

        The escalation runs in a process of its own session (leftovers.stop_trial_command), not
        here: the asker is often an Airflow task in its on_kill, which Airflow SIGKILLs 5 s
        after its SIGTERM, before a grace of 5 s has passed. Here we only wait for it (so a
        caller that lives on sees the trial gone), up to the grace and a margin."""
        check_host(handle.get("trial_id", ""), handle)  # never signal another host's pid here
        sys_dir = Path(handle["trial_dir"])
        if read_state_file(sys_dir) == 0:
            return  # finished successfully before we got here
        if self._cancel_request(sys_dir) is None:
            self._write_cancel(sys_dir, status, reason)
        pid = handle["pid"]
        alive = process_alive(pid, handle.get("started"))
        grace = KILL_GRACE_SECONDS
        script = stop_trial_command(
            pid if alive else None, _tree(pid) if alive else [], trial_mark(str(sys_dir)), grace
        )
        env = {k: v for k, v in os.environ.items() if k != MARK_VAR}  # the stopper must not stop itself
        stopper = subprocess.Popen(
            ["bash", "-c", script],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # outlives this process, and a kill of its process group
            close_fds=True,
        )
        try:
            stopper.wait(timeout=grace + STOP_WAIT_MARGIN)
        except subprocess.TimeoutExpired:
            log.warning("trial %s: still stopping after %.0f s", handle.get("trial_id"), grace + STOP_WAIT_MARGIN)

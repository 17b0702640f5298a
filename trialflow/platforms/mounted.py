"""A folder both Airflow and the trials see: code staged once, parameters per trial, metrics read back.

NNI's cluster platforms (Kubernetes with NFS / Azure Files / a claim, OpenPAI's
storage config) all share files the same way: the user mounts the share on the
Airflow workers (trialflow never runs ``sudo mount``) and names that folder;
the jobs mount it too. Everything here is file work on the Airflow side, so a
platform module only decides the folder layout and what its jobs run.

Reads are by byte offset, so a cursor in XCom or trigger kwargs picks up
exactly where the last poll stopped, on any worker, after any restart.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trialflow.trial.folder import TrialFileRefused, read_in_folder, read_small
from trialflow.trial.packing import SDK_FILES, check_limits, collect_files, sdk_pythonpath
from trialflow.trial.protocol import Metric, read_framed, read_stdout_lines
from trialflow.trial.status import CANCEL_STATUSES, TrialStatus

if TYPE_CHECKING:
    from trialflow.platforms.base import Resume, TrialSpec

#: How much of a file one poll reads while the trial runs (all of it once the trial ended).
READ_CHUNK = 4 * 1024 * 1024
#: The marker of a complete copy: a staging interrupted half-way is never used.
COMPLETE = ".complete"
#: In a trial's folder: its output (metrics are read from it), its exit code, why we stopped it.
LOG_FILE = "trial.log"
RC_FILE = ".trialflow-rc"
CANCEL_FILE = ".trialflow-cancel.json"


@dataclass(frozen=True)
class SharedPaths:
    """One trial's folders: ``local_*`` as Airflow sees the storage, the rest as the job does."""

    local_root: Path
    local_trial: Path
    root: str
    trial: str

    @property
    def code(self) -> str:
        return f"{self.trial}/code"

    @property
    def sdk(self) -> str:
        return f"{self.root}/sdk"


def shared_paths(local_mount: str | Path, job_mount: str, experiment_id: str, trial_id: str) -> SharedPaths:
    """``<mount>/trialflow/<experiment>/{code,sdk,trials/<trial>}`` on both sides."""
    local_root = Path(local_mount) / "trialflow" / experiment_id
    root = f"{job_mount.rstrip('/')}/trialflow/{experiment_id}"
    return SharedPaths(local_root, local_root / "trials" / trial_id, root, f"{root}/trials/{trial_id}")


def job_script(command: str, p: SharedPaths, env: dict[str, str]) -> list[str]:
    """A job's commands (POSIX sh, one per line): the staged code copied into the trial folder
    (NNI did the same), NNI's environment, the trial command with its output teed into
    ``trial.log`` and its exit code kept (sh has no pipefail). Every value is quoted once, here."""
    q = shlex.quote
    rc = q(f"{p.trial}/{RC_FILE}")
    lines = ["set -e", f"mkdir -p {q(p.trial)}", f"[ -d {q(p.code)} ] || cp -R {q(p.root + '/code')} {q(p.code)}"]
    lines += [f"export {key}={q(value)}" for key, value in sorted(env.items())]
    lines += [
        f"export PYTHONPATH={q(sdk_pythonpath(p.sdk))}${{PYTHONPATH:+:$PYTHONPATH}}",
        f"cd {q(p.code)}",
        "set +e",
        f"{{ sh -c {q(command)} 2>&1; echo $? > {rc}; }} | tee -a {q(p.trial + '/' + LOG_FILE)}",
        f'exit "$(cat {rc})"',
    ]
    return lines


def record_cancel(folder: Path, status: str, reason: str) -> None:
    """Why trialflow stopped a job, beside the trial: the platform only says "stopped"/"killed",
    and whichever worker or triggerer polls next must report the cancel status asked for."""
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / (CANCEL_FILE + ".tmp")
    tmp.write_text(json.dumps({"status": status, "reason": reason}))
    os.replace(tmp, folder / CANCEL_FILE)


def recorded_cancel(folder: Path) -> tuple[TrialStatus, str] | None:
    """(status, reason) that :func:`record_cancel` left, or None (someone else stopped it)."""
    return parse_cancel(read_small(folder, CANCEL_FILE))


def parse_cancel(text: str | None) -> tuple[TrialStatus, str] | None:
    """A cancel record (``{"status", "reason"}`` JSON, in a file or a job's tag); None when it is
    missing or not one (a hand-edited tag, a torn file), never an exception."""
    try:
        asked = json.loads(text or "null")
        status = TrialStatus(asked["status"])
    except (ValueError, KeyError, TypeError):
        return None
    return (status, str(asked.get("reason") or "")) if status in CANCEL_STATUSES else None


def stage_tree(root: Path, code_dir: Path | None, exclude: tuple[Path, ...] = ()) -> None:
    """Copy the code (honouring .nniignore and NNI's size limits; None: it is in the image)
    to ``root/code`` and trialflow's light SDK to ``root/sdk``, once per experiment.
    Concurrent submitters race safely: each copies into a temporary folder and the first
    complete copy is renamed into place."""
    parts: list[tuple[str, Path | None]] = [("code", Path(code_dir))] if code_dir is not None else []
    for name, source in [*parts, ("sdk", None)]:
        target = root / name
        if (target / COMPLETE).exists():
            continue
        files: list[Path]
        if source is None:
            import trialflow

            source = Path(trialflow.__file__).resolve().parent.parent
            files = [Path(f) for f in SDK_FILES]
        else:
            files = collect_files(source, exclude)
            check_limits(source, files)
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=root))
        for rel in files:
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source / rel, tmp / rel, follow_symlinks=False)
        (tmp / COMPLETE).touch()
        try:
            os.rename(tmp, target)
        except OSError:  # another submitter got there first
            shutil.rmtree(tmp, ignore_errors=True)


def write_parameter_file(folder: Path, text: str) -> None:
    """parameter.cfg (``text``: TrialSpec.parameter_cfg) atomically, before the job exists (nni
    polls for a non-empty file)."""
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / "parameter.cfg.tmp"
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, folder / "parameter.cfg")


#: The offset of a metrics file that was refused (a symlink, a FIFO): said once, never read.
REFUSED = -1


def read_framed_file(folder: Path, name: str, offset: int, final: bool = False) -> tuple[list[Metric], int, list[str]]:
    """New ``.nni/metrics`` frames of ``folder/name`` from ``offset``: one chunk while the
    trial runs, everything once it ended. Returns the metrics, the next offset and why any
    record was skipped. A file the trial replaced by a symlink or something not a regular
    file is not read (trialflow.trial.folder): said once, and the offset stays REFUSED."""
    metrics: list[Metric] = []
    skipped: list[str] = []
    if offset == REFUSED:
        return metrics, offset, skipped
    while True:
        try:
            data = read_in_folder(folder, name, offset, READ_CHUNK)
        except TrialFileRefused as exc:
            return metrics, REFUSED, [*skipped, str(exc)]
        last = len(data) < READ_CHUNK
        read = read_framed(data, final=final and last)
        metrics += read.metrics
        skipped += read.skipped
        offset += read.consumed
        if not final or last or read.consumed == 0:
            return metrics, offset, skipped


def read_log_metrics(
    folder: Path, name: str, cursor: dict[str, Any], final: bool = False
) -> tuple[list[Metric], list[str]]:
    """New ``NNISDK_MEb`` lines of the trial's output file ``folder/name`` (see
    :func:`read_metric_lines`); one the trial replaced by a symlink or a FIFO is not read,
    said once (``cursor["refused"]``)."""
    if cursor.get("refused"):
        return [], []
    try:
        return read_metric_lines(lambda offset, limit: read_in_folder(folder, name, offset, limit), cursor, final)
    except TrialFileRefused as exc:
        cursor["refused"] = True
        return [], [str(exc)]


def read_metric_lines(
    read: Callable[[int, int], bytes], cursor: dict[str, Any], final: bool = False
) -> tuple[list[Metric], list[str]]:
    """New ``NNISDK_MEb`` lines of a trial's output wherever it is (a file here, a blob),
    ``read(offset, limit)`` giving its bytes; ``cursor`` (``offset``, and ``in_long_line``
    while a too-long line is being skipped) is updated in place. One chunk while the trial
    runs, everything left once it ended."""
    metrics: list[Metric] = []
    skipped: list[str] = []
    while True:
        offset = int(cursor.get("offset", 0))
        data = read(offset, READ_CHUNK)
        last = len(data) < READ_CHUNK
        read_now = read_stdout_lines(data, in_long_line=bool(cursor.get("in_long_line")), final=final and last)
        metrics += read_now.metrics
        skipped += read_now.skipped
        cursor["offset"] = offset + read_now.consumed
        cursor.pop("in_long_line", None)
        if read_now.in_long_line:
            cursor["in_long_line"] = True
        if not final or last or read_now.consumed == 0:
            return metrics, skipped


def signal_fault(exit_code: int | None) -> str | None:
    """A job's exit code that says a signal ended it (above 128, as shells and container
    runtimes report one), in words: a fault, not the trial's own exit."""
    if exit_code is None or exit_code <= 128:
        return None
    return f"killed by signal {exit_code - 128} (exit code {exit_code})"


#: Where a restarted (or PBT) trial's checkpoint is fetched in its folder, one folder per attempt.
RESUME_DIR = ".trialflow-resume"


@contextlib.contextmanager
def restart_lock(sys_dir: Path) -> Iterator[None]:
    """One restarter at a time in a trial's folder (released if its process dies)."""
    import fcntl

    with open(sys_dir / f"{RESUME_DIR}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def resume_in_folder(spec: TrialSpec, local: Path, inside: str, attempt: int, resume: Resume) -> TrialSpec:
    """``spec`` starting from ``resume``'s checkpoint, fetched into the trial's folder as this
    machine sees it (``local``) and named as the job sees the same folder (``inside``): local,
    a share the Airflow workers mount (Kubernetes, OpenPAI, DLTS)."""
    fetched = fetched_resume(local, attempt, resume)
    return spec.resuming(f"{inside.rstrip('/')}/{fetched.relative_to(local).as_posix()}", resume)


def fetched_resume(sys_dir: Path, attempt: int, resume: Resume) -> Path:
    """The checkpoint fetched into the trial's folder (this machine's view of it) for
    ``attempt`` (once: a folder there from an earlier try of the same restart is whole, a
    partial one is fetched again)."""
    folder = sys_dir / RESUME_DIR / str(attempt)
    sys_dir.mkdir(parents=True, exist_ok=True)
    with restart_lock(sys_dir):
        if folder.is_dir():
            return folder
        partial = folder.with_name(folder.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.parent.mkdir(parents=True, exist_ok=True)
        resume.fetch(partial)
        os.replace(partial, folder)
    return folder

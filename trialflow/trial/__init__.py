"""trialflow's trial SDK: NNI's trial API with no dependencies.

Use it exactly like ``nni``::

    from trialflow import trial
    params = trial.get_next_parameter()
    trial.report_intermediate_result(0.5)
    trial.report_final_result({"default": 0.9, "loss": 0.1})

It speaks NNI's own file/stdout protocol, so the same trial runs under NNI
and trialflow, and ``import nni`` code runs under trialflow unchanged. Outside
an experiment (no ``NNI_SYS_DIR``) it behaves like nni's standalone mode:
parameters are ``{}`` and results are printed.
"""

from __future__ import annotations

import os
import sys
import time

from trialflow.trial import lean_json
from trialflow.trial.wire import (
    ARTIFACTS_DIR,
    CHECKPOINT_KIND,
    CHECKPOINT_RECORDS_VAR,
    METRICS_FILE,
    PARAMETER_FILE,
    RESUME_FOLDER_VAR,
    RESUME_STEP_VAR,
    checkpoint_folder,
    frame,
    metric_record,
    stdout_line,
)

#: The SDK must not import typing (trial start-up time), so its names exist for type checkers only.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "get_next_parameter",
    "get_current_parameter",
    "report_intermediate_result",
    "report_final_result",
    "get_trial_id",
    "get_experiment_id",
    "get_sequence_id",
    "checkpoint",
    "last_checkpoint",
    "artifacts_folder",
]


def _resumed_step() -> int:
    """The step a restarted trial goes on from (0 on a first start, or for a value that is not one)."""
    text = os.environ.get(RESUME_STEP_VAR, "")
    return int(text) if text.isdigit() and len(text) <= 9 else 0


#: A restarted trial's intermediate results go on from the step its checkpoint was saved at, so
#: none is counted twice and none is missing (the store keeps one value per step).
_state: dict[str, Any] = {"parameter": None, "intermediate_seq": _resumed_step(), "finals": 0}
#: How long get_next_parameter waits for parameter.cfg (the platform writes it before launch,
#: so a long wait means something is wrong; nni waits forever, we say so instead).
PARAMETER_WAIT_SECONDS = float(os.environ.get("TRIALFLOW_PARAMETER_WAIT", "600"))


def _sys_dir() -> str | None:
    return os.environ.get("NNI_SYS_DIR") or None


def get_next_parameter() -> dict[str, Any]:
    """The parameters chosen for this trial (``{}`` outside an experiment)."""
    sys_dir = _sys_dir()
    if sys_dir is None:
        _state["parameter"] = {"parameter_id": None, "parameters": {}}
        return {}
    path = os.path.join(sys_dir, PARAMETER_FILE)
    deadline = time.monotonic() + PARAMETER_WAIT_SECONDS
    while True:
        try:
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
            if text.strip():
                break
        except FileNotFoundError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"no parameters at {path} after {PARAMETER_WAIT_SECONDS:.0f} s")
        time.sleep(0.2)
    _state["parameter"] = _parameter_record(path, text)
    return _state["parameter"]["parameters"]


def _parameter_record(path: str, text: str) -> dict[str, Any]:
    """NNI's parameter record, ``{"parameter_id": ..., "parameters": {...}}``; anything else in
    the file is said with its path, not as a parser's traceback."""
    try:
        record = lean_json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise RuntimeError(f"{path} is not JSON ({str(exc)[:200]}): NNI's parameter file is expected") from None
    if not isinstance(record, dict) or "parameters" not in record:
        raise RuntimeError(f'{path} has no "parameters" key: NNI\'s parameter file is expected')
    return record


def get_current_parameter(tag: str | None = None) -> object:
    if _state["parameter"] is None:
        get_next_parameter()
    params = _state["parameter"]["parameters"]
    return params if tag is None else params[tag]


def get_trial_id() -> str:
    return os.environ.get("NNI_TRIAL_JOB_ID", "STANDALONE")


def get_experiment_id() -> str:
    return os.environ.get("NNI_EXP_ID", "STANDALONE")


def get_sequence_id() -> int:
    return int(os.environ.get("NNI_TRIAL_SEQ_ID", "0"))


def _parameter_id() -> object:
    return (_state["parameter"] or {}).get("parameter_id")


def _send(kind: str, sequence: int, metric: object) -> None:
    record = metric_record(os.environ.get("NNI_TRIAL_JOB_ID"), _parameter_id(), kind, sequence, metric)
    sys_dir = _sys_dir()
    if sys_dir is None:
        print(f"[trialflow standalone] {kind.lower()} result: {metric}", flush=True)
        return
    if os.environ.get("NNI_PLATFORM") == "local" and not os.environ.get("REUSE_MODE"):
        # One write per record with O_APPEND: concurrent writers never interleave a record.
        os.makedirs(os.path.join(sys_dir, ".nni"), exist_ok=True)
        fd = os.open(os.path.join(sys_dir, METRICS_FILE), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, frame(record))
        finally:
            os.close(fd)
    else:
        sys.stdout.write(stdout_line(record))
        sys.stdout.flush()


def report_intermediate_result(metric: object) -> None:
    """A per-epoch value; assessors decide early stopping from these."""
    _send("PERIODICAL", _state["intermediate_seq"], metric)
    _state["intermediate_seq"] += 1


def finals_reported() -> int:
    """How many final results this process has reported (a function trial that reported its
    own returns None: trialflow.trial.function)."""
    return int(_state["finals"])


def report_final_result(metric: object) -> None:
    """The trial's result: a number, or a dict whose ``default`` key is the number to optimize."""
    _send("FINAL", 0, metric)
    _state["finals"] += 1  # a function trial that reported its own returns None (trial.function)


def last_checkpoint() -> str | None:
    """The folder of the checkpoint this trial starts from, or None: a first start (or a run
    outside trialflow). trialflow fills it before restarting a trial from its last checkpoint;
    load from it when given, then report results as usual (they go on from its step)."""
    folder = os.environ.get(RESUME_FOLDER_VAR)
    return folder if folder and os.path.isdir(folder) else None


def artifacts_folder() -> str:
    """The folder for this trial's artifacts (a trained model, a plot, a report): where
    trialflow keeps checkpoints, what the trial writes here is copied to the artifact store
    when it ends, listed on its page, and the best trial's named on the experiment's Asset.
    Outside trialflow it is a folder under the trial's output folder (or the working
    directory), nothing more."""
    base = os.environ.get("NNI_OUTPUT_DIR") or _sys_dir() or os.getcwd()
    folder = os.path.join(base, ARTIFACTS_DIR)
    os.makedirs(folder, exist_ok=True)
    return folder


def checkpoint(step: int | None = None) -> _Saving:
    """Save a checkpoint: ``with trial.checkpoint() as folder:`` write its files into ``folder``.

    ``step`` defaults to the number of intermediate results reported so far, so a restart from
    it reports its next result as the next one. The folder becomes the step's checkpoint only
    when the block ends without an error (renamed into place, a step saved again replaced);
    an error leaves no half-written checkpoint. Outside trialflow it is a folder under the
    trial's output folder (or the working directory), nothing more."""
    return _Saving(_state["intermediate_seq"] if step is None else step)


class _Saving:
    """The ``with`` block of :func:`checkpoint` (a class: the SDK imports no contextlib)."""

    def __init__(self, step: int) -> None:
        self.relative = checkpoint_folder(step)
        self.step = step
        base = os.environ.get("NNI_OUTPUT_DIR") or _sys_dir() or os.getcwd()
        self.final = os.path.join(base, self.relative)
        self.partial = self.final + ".partial"

    def __enter__(self) -> str:
        import shutil

        shutil.rmtree(self.partial, ignore_errors=True)  # an earlier attempt that died mid-save
        os.makedirs(self.partial)
        return self.partial

    def __exit__(self, kind: object, error: object, traceback: object) -> None:
        import shutil

        if error is not None:
            shutil.rmtree(self.partial, ignore_errors=True)
            return  # the error goes on
        if os.path.isdir(self.final):
            shutil.rmtree(self.final)  # the same step saved again: the later save stands
        os.replace(self.partial, self.final)
        if os.environ.get(CHECKPOINT_RECORDS_VAR) == "1":
            _send(CHECKPOINT_KIND, self.step, {"folder": self.relative})

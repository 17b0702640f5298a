"""The bytes a trial writes: what the SDK needs and nothing more.

Kept to ``os`` and the SDK's own JSON (:mod:`trialflow.trial.lean_json`, which does not
import the ``json`` package) so ``import trialflow.trial`` stays near a bare interpreter's
start; the readers and everything else live in :mod:`trialflow.trial.protocol`.
"""

from __future__ import annotations

import os

from trialflow.trial import lean_json

PARAMETER_FILE = "parameter.cfg"
METRICS_FILE = os.path.join(".nni", "metrics")
STATE_FILE = os.path.join(".nni", "state")
MAX_RECORD_BYTES = 999_999

#: Checkpoints (trialflow's, not NNI's): saved under the trial's output folder, one folder per
#: step; a CHECKPOINT record (sent only when trialflow keeps checkpoints) names a saved one.
CHECKPOINTS_DIR = "checkpoints"
#: A trial's artifacts (a model file, a plot): what it writes here is kept when it ends.
ARTIFACTS_DIR = "artifacts"
CHECKPOINT_KIND = "CHECKPOINT"
#: Set by trialflow for a trial whose checkpoints it keeps: send a record for each one saved.
CHECKPOINT_RECORDS_VAR = "TRIALFLOW_CHECKPOINTS"
#: Set by trialflow for a trial restarted from a checkpoint: its folder, and the step it was
#: saved at (the number of intermediate results reported before it).
RESUME_FOLDER_VAR = "TRIALFLOW_RESUME_CHECKPOINT"
RESUME_STEP_VAR = "TRIALFLOW_RESUME_STEP"
#: NNI's PBTTuner gave a trial two folders as parameters: the checkpoint to load, and where
#: to save its own. Here both are in the trial's output folder where it runs: the save folder
#: is kept as its checkpoint when it ends, and the load folder is the parent's checkpoint
#: fetched there (RESUME_FOLDER_VAR), or an empty folder's name in the first generation.
PBT_LOAD_KEY = "load_checkpoint_dir"
PBT_SAVE_KEY = "save_checkpoint_dir"
PBT_SAVE_DIR = "pbt/save"
PBT_NO_LOAD_DIR = "pbt/nothing-to-load"
#: Steps are numbered like intermediate results; nine digits sort as numbers do.
MAX_CHECKPOINT_STEP = 999_999_999


def checkpoint_folder(step: int) -> str:
    """A checkpoint's folder, relative to the trial's output folder: ``checkpoints/000000012``."""
    if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= MAX_CHECKPOINT_STEP:
        raise ValueError(f"a checkpoint's step is an integer from 0 to {MAX_CHECKPOINT_STEP}, got {step!r}")
    return f"{CHECKPOINTS_DIR}/{step:09d}"


def metric_record(trial_job_id: str | None, parameter_id: object, kind: str, sequence: int, value: object) -> dict:
    """The JSON object nni sends, with the metric itself as a JSON string inside."""
    return {
        "parameter_id": parameter_id,
        "trial_job_id": trial_job_id,
        "type": kind,
        "sequence": sequence,
        "value": dumps_value(value),
    }


def dumps_value(value: object) -> str:
    """JSON for a metric value; NaN/Infinity allowed as nni's json_tricks writes them."""
    return lean_json.dumps(value, default=_to_builtin)


def _to_builtin(obj: object) -> object:
    # numpy / torch scalars: anything with a float value
    for attr in ("item", "__float__"):
        if hasattr(obj, attr):
            return getattr(obj, attr)()
    raise TypeError(f"metric value of type {type(obj).__name__} is not JSON serializable")


def frame(record: dict[str, object]) -> bytes:
    """``ME%06d`` + JSON + newline, length in bytes including the newline."""
    data = (lean_json.dumps(record) + "\n").encode("utf-8")
    if len(data) > MAX_RECORD_BYTES:
        raise ValueError(f"metric record of {len(data)} bytes exceeds NNI's {MAX_RECORD_BYTES}-byte limit")
    return b"ME%06d" % len(data) + data


def stdout_line(record: dict[str, object]) -> str:
    return f"NNISDK_MEb'{lean_json.dumps(record)}'\n"

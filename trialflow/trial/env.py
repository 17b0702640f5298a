"""The environment an NNI trial expects (nni/runtime/env_vars.py), built in one place.

``NNI_TRIAL_COMMAND_CHANNEL`` is deliberately never set: nni 3.0 would then
talk HTTP back to a manager. Without it, nni uses the file/stdout channel that
trialflow reads by pulling, so trials never need to reach the Airflow machine.

A local trial starts from the worker's environment, and an Airflow worker's
environment holds Airflow's secrets: the metadata database URL, the Fernet and
JWT keys, connections (``AIRFLOW_CONN_*``) and variables (``AIRFLOW_VAR_*``).
Trial code is the user's, but it is not Airflow's: it gets none of them.
``TRIALFLOW_TRIAL_ENV_DROP`` (comma-separated shell patterns) hides more;
``TRIALFLOW_TRIAL_ENV_KEEP`` lets named ones through anyway.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from fnmatch import fnmatchcase

NNI_VARS = (
    "NNI_PLATFORM",
    "NNI_EXP_ID",
    "NNI_TRIAL_JOB_ID",
    "NNI_SYS_DIR",
    "NNI_OUTPUT_DIR",
    "NNI_TRIAL_SEQ_ID",
    "NNI_CODE_DIR",
    "NNI_TRIAL_COMMAND_CHANNEL",
    "MULTI_PHASE",
    "REUSE_MODE",
)


#: Never passed to trials: every Airflow setting (``AIRFLOW__SECTION__KEY``, the database URL
#: and every key among them), connections and variables. ``AIRFLOW_CTX_*`` (which DAG, run and
#: task this is) stays.
HIDDEN_FROM_TRIALS = ("AIRFLOW__*", "AIRFLOW_CONN_*", "AIRFLOW_VAR_*")
DROP_VAR = "TRIALFLOW_TRIAL_ENV_DROP"
KEEP_VAR = "TRIALFLOW_TRIAL_ENV_KEEP"


def _patterns(text: str | None) -> list[str]:
    return [part.strip() for part in (text or "").split(",") if part.strip()]


def inherited_env(base: Mapping[str, str]) -> dict[str, str]:
    """``base`` without Airflow's secrets (and whatever TRIALFLOW_TRIAL_ENV_DROP names), keeping
    what TRIALFLOW_TRIAL_ENV_KEEP names; the patterns are read from ``base`` itself."""
    drop = list(HIDDEN_FROM_TRIALS) + _patterns(base.get(DROP_VAR))
    keep = _patterns(base.get(KEEP_VAR))
    return {
        k: v
        for k, v in base.items()
        if not any(fnmatchcase(k, p) for p in drop) or any(fnmatchcase(k, p) for p in keep)
    }


def trial_env(
    *,
    platform: str,
    experiment_id: str,
    trial_id: str,
    sys_dir: str,
    output_dir: str,
    sequence: int,
    code_dir: str,
    gpu_indices: list[int] | None = None,
    base: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Environment for one trial: ``base`` (usually os.environ) minus stale NNI vars, plus ours."""
    env = {k: v for k, v in inherited_env(os.environ if base is None else base).items() if k not in NNI_VARS}
    env.update(
        {
            "NNI_PLATFORM": platform,
            "NNI_EXP_ID": experiment_id,
            "NNI_TRIAL_JOB_ID": trial_id,
            "NNI_SYS_DIR": sys_dir,
            "NNI_OUTPUT_DIR": output_dir,
            "NNI_TRIAL_SEQ_ID": str(sequence),
            "NNI_CODE_DIR": code_dir,
            "PYTHONUNBUFFERED": "1",
        }
    )
    # NNI: trialGpuNumber 0 hides every GPU, so a trial never grabs one by accident.
    env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, gpu_indices or []))
    return env

"""The environment an NNI trial expects (nni/runtime/env_vars.py), built in one place.

``NNI_TRIAL_COMMAND_CHANNEL`` is deliberately never set: nni 3.0 would then
talk HTTP back to a manager. Without it, nni uses the file/stdout channel that
trialflow reads by pulling, so trials never need to reach the Airflow machine.
"""

from __future__ import annotations

import os
from typing import Mapping

NNI_VARS = (
    "NNI_PLATFORM", "NNI_EXP_ID", "NNI_TRIAL_JOB_ID", "NNI_SYS_DIR", "NNI_OUTPUT_DIR",
    "NNI_TRIAL_SEQ_ID", "NNI_CODE_DIR", "NNI_TRIAL_COMMAND_CHANNEL", "MULTI_PHASE", "REUSE_MODE",
)


def trial_env(*, platform: str, experiment_id: str, trial_id: str, sys_dir: str, output_dir: str,
              sequence: int, code_dir: str, gpu_indices: list[int] | None = None,
              base: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment for one trial: ``base`` (usually os.environ) minus stale NNI vars, plus ours."""
    env = {k: v for k, v in (os.environ if base is None else base).items() if k not in NNI_VARS}
    env.update({
        "NNI_PLATFORM": platform,
        "NNI_EXP_ID": experiment_id,
        "NNI_TRIAL_JOB_ID": trial_id,
        "NNI_SYS_DIR": sys_dir,
        "NNI_OUTPUT_DIR": output_dir,
        "NNI_TRIAL_SEQ_ID": str(sequence),
        "NNI_CODE_DIR": code_dir,
        "PYTHONUNBUFFERED": "1",
    })
    # NNI: trialGpuNumber 0 hides every GPU, so a trial never grabs one by accident.
    env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, gpu_indices or []))
    return env

"""NNI v1 + v2 experiment configs -> one validated ExperimentConfig. No Airflow imports."""

from __future__ import annotations

from trialflow.config.errors import ConfigError, Problem
from trialflow.config.loader import (
    effective_code_directory,
    effective_gpu_number,
    effective_trial_command,
    load_config,
    to_v2_dict,
)
from trialflow.config.model import AlgorithmConfig, ExperimentConfig

__all__ = [
    "AlgorithmConfig",
    "ConfigError",
    "ExperimentConfig",
    "Problem",
    "effective_code_directory",
    "effective_gpu_number",
    "effective_trial_command",
    "load_config",
    "to_v2_dict",
]

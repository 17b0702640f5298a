"""NNI v1 + v2 experiment configs -> one validated ExperimentConfig. No Airflow imports.

The names below are loaded when first used (PEP 562): the loader and the model pull in pydantic
and the whole schema, which a DAG parse with a kept plan never needs, while its small modules
(inline.py's mark, errors.py) are imported on their own without them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trialflow.config.errors import ConfigError, Problem
    from trialflow.config.loader import (
        effective_code_directory,
        effective_gpu_number,
        effective_trial_command,
        load_config,
        to_v2_dict,
    )
    from trialflow.config.model import AlgorithmConfig, ExperimentConfig

#: Each public name and the module that defines it.
_WHERE = {
    "AlgorithmConfig": "model",
    "ConfigError": "errors",
    "ExperimentConfig": "model",
    "Problem": "errors",
    "effective_code_directory": "loader",
    "effective_gpu_number": "loader",
    "effective_trial_command": "loader",
    "load_config": "loader",
    "to_v2_dict": "loader",
}
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


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # found once: later lookups do not come back here
    return value

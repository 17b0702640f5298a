"""``nni.utils``: ``merge_parameter``, which NNI's own examples use to fold the tuner's
parameters into their argparse defaults, and the helpers customized tuners and assessors use
(``OptimizeMode``, ``extract_scalar_reward``, ``ClassArgsValidator``...). Only loaded where the
real nni is absent: see ``nni``."""

from enum import Enum as _Enum
from typing import Any  # noqa: F401 (the type comments')


def merge_parameter(base_params, override_params):  # type: (Any, Any) -> Any
    """``base_params`` (an argparse Namespace or a dict) updated from ``override_params``, as
    NNI does it: every key must already exist there, and a value must keep the type the
    default has (unless the default is None)."""
    if override_params is None:
        return base_params
    is_dict = isinstance(base_params, dict)
    for key, value in override_params.items():
        known = key in base_params if is_dict else hasattr(base_params, key)
        if not known:
            raise ValueError(f"Key '{key}' not found in base parameters.")
        current = base_params[key] if is_dict else getattr(base_params, key)
        if current is not None and type(current) is not type(value):
            raise TypeError(
                f"Expected '{key}' in override parameters to have type '{type(current).__name__}', "
                f"but found '{type(value).__name__}'."
            )
        if is_dict:
            base_params[key] = value
        else:
            setattr(base_params, key, value)
    return base_params


# -- what customized tuners and assessors use (trialflow.tuning.custom) -----------------------


class OptimizeMode(_Enum):
    """NNI's optimize_mode values."""

    Minimize = "minimize"
    Maximize = "maximize"


class MetricType:
    """NNI's metric kinds."""

    FINAL = "FINAL"
    PERIODICAL = "PERIODICAL"
    REQUEST_PARAMETER = "REQUEST_PARAMETER"


def extract_scalar_reward(value, scalar_key="default"):  # type: (Any, str) -> float | int
    """A final result as one number: itself, or its dict's ``scalar_key`` entry (NNI's rule)."""
    if isinstance(value, (float, int)) and not isinstance(value, bool):
        return value
    if isinstance(value, dict) and scalar_key in value and isinstance(value[scalar_key], (float, int)):
        reward = value[scalar_key]  # type: float | int
        return reward
    raise RuntimeError(
        "Incorrect final result: the final result should be float/int, "
        'or a dict which has a key named "default" whose value is float/int.'
    )


def extract_scalar_history(trial_history, scalar_key="default"):  # type: (list[Any], str) -> list[float | int]
    """Each intermediate result as one number (NNI's rule)."""
    return [extract_scalar_reward(ele, scalar_key) for ele in trial_history]


def convert_dict2tuple(value):  # type: (Any) -> Any
    """Dicts as tuples of their items, nested (hashable), as NNI's helper does."""
    if isinstance(value, dict):
        for _keys in value:
            value[_keys] = convert_dict2tuple(value[_keys])
        return tuple(sorted(value.items()))
    return value


def split_index(params):  # type: (Any) -> Any
    """NNI's nested choices as plain values: ``{_index, _value}`` pairs become their value."""
    if isinstance(params, dict):
        if "_index" in params and "_value" in params:
            return split_index(params["_value"])
        return {k: split_index(v) for k, v in params.items()}
    return params


class ClassArgsValidator:
    """NNI's base for a class's classArgs check (``validate_class_args``); trialflow calls a
    subclass's check where NNI did, before the class is made."""

    def validate_class_args(self, **kwargs):  # type: (Any) -> None
        pass

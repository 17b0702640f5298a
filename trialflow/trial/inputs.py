"""A run's inputs: values an experiment's trials take from the tasks upstream of it.

A DAG author's ``prepare`` task writes the data and returns its path; the experiment task
group takes ``inputs={"data": prepare_output}`` (an XComArg, or a Jinja template). The start
step renders them once per DAG run (Airflow's templating; shown in its Rendered Template) and
keeps them with the run's window, and every trial of the run gets them in its environment:
``TRIALFLOW_INPUT_DATA=...`` for a command (``python3 train.py --data $TRIALFLOW_INPUT_DATA``),
and, for a function trial, as keyword arguments its signature names
(``def svc(params, data)``). All of them travel as JSON in ``TRIALFLOW_INPUTS``.

Stdlib only: shipped with the trial SDK to machines and pods (the function runner reads them).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

#: Every input as JSON (names to text, numbers or booleans).
ENV_JSON = "TRIALFLOW_INPUTS"
#: Each input as text, one variable per name: TRIALFLOW_INPUT_<NAME IN UPPER CASE>.
ENV_PREFIX = "TRIALFLOW_INPUT_"
MAX_INPUTS = 32
MAX_VALUE_CHARS = 8192
MAX_TOTAL_CHARS = 65536
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")

Value = str | int | float | bool


class InputsError(ValueError):
    """An input that cannot go to a trial (the message names it and says what was expected)."""


def check_inputs(raw: Mapping[str, Any] | None) -> dict[str, Value]:
    """The inputs as trials get them: identifiers (an environment variable's name is made of
    it) to text, whole or finite numbers, or booleans, each and all bounded. Raises
    InputsError naming the first input that is not."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise InputsError(f"inputs: expected a mapping of name -> value, got {type(raw).__name__}")
    if len(raw) > MAX_INPUTS:
        raise InputsError(f"inputs: at most {MAX_INPUTS}, got {len(raw)}")
    checked: dict[str, Value] = {}
    total = 0
    for name, value in raw.items():
        if not isinstance(name, str) or not name.isascii() or not _NAME.fullmatch(name):
            raise InputsError(f"inputs: {str(name)[:80]!r} is not a name (letters, digits, '_', at most 64)")
        if isinstance(value, float) and not math.isfinite(value):
            raise InputsError(f"inputs.{name}: expected a finite number, got {value}")
        if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 63:
            raise InputsError(f"inputs.{name}: expected a whole number within 64 bits, got {value.bit_length()} bits")
        if not isinstance(value, str | int | float | bool):
            raise InputsError(
                f"inputs.{name}: expected text, a number or a boolean (what an upstream task returned, "
                f"rendered), got {type(value).__name__}"
            )
        if isinstance(value, str) and "\x00" in value:
            raise InputsError(
                f"inputs.{name}: holds a NUL byte at character {value.index(chr(0))}, which no environment "
                "variable or command line can carry"
            )
        text = value if isinstance(value, str) else json.dumps(value)
        if len(text) > MAX_VALUE_CHARS:
            raise InputsError(f"inputs.{name}: at most {MAX_VALUE_CHARS} characters, got {len(text)}")
        total += len(text)
        if total > MAX_TOTAL_CHARS:
            raise InputsError(f"inputs: at most {MAX_TOTAL_CHARS} characters in all")
        checked[name] = value
    return checked


def inputs_env(inputs: Mapping[str, Value] | None) -> dict[str, str]:
    """The trial's environment variables for ``inputs`` (checked ones)."""
    if not inputs:
        return {}
    env = {ENV_JSON: json.dumps(dict(inputs), ensure_ascii=False)}
    for name, value in inputs.items():
        env[ENV_PREFIX + name.upper()] = value if isinstance(value, str) else json.dumps(value)
    return env


def read_inputs(environ: Mapping[str, str]) -> dict[str, Value]:
    """The inputs a trial was given (in the trial: ``os.environ``); {} when none."""
    text = environ.get(ENV_JSON)
    if not text:
        return {}
    if len(text) > MAX_TOTAL_CHARS * 2 + 4096:
        raise InputsError(f"{ENV_JSON}: longer than inputs can be")
    try:
        value = json.loads(text)
    except ValueError:
        raise InputsError(f"{ENV_JSON}: not JSON") from None
    return check_inputs(value)

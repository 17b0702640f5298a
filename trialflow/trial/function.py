"""Function trials: a Python function run as a trial, NNI-style. Stdlib only (shipped with the SDK).

    python -m trialflow.trial.function models.train:train

The function is named by import path, never pickled: it is imported from the trial's working
directory (its code folder, shipped to a machine or pod like any trial's code), called with the
trial's parameters (a dict), and what it returns (a number, or a dict whose ``default`` is the
number) is reported as the final result. It reports intermediate results through the trial SDK
(``trialflow.trial.report_intermediate_result``) as any trial does, so assessors, curves and
metrics work unchanged. A function that reported its final result itself may return None. An
exception fails the trial: the traceback goes to stderr, whose last line becomes the trial's
message, and the exit code is 1. The command is an ordinary trial command: every platform runs
it with the same process-group kill, metrics and GPU claims as a command trial.
"""

from __future__ import annotations

import importlib
import inspect
import os
import re
import shlex
import sys
import traceback

from trialflow import trial
from trialflow.trial.inputs import read_inputs

#: Names are Python identifiers joined by dots, module and attribute parted by one colon.
_DOTTED = r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*"
_PATH = re.compile(f"{_DOTTED}:{_DOTTED}")
#: Longer than any sensible import path; checked before the pattern runs.
MAX_IMPORT_PATH = 200


class FunctionTrialError(ValueError):
    """The import path, or what the function gave back, is not usable (the message says why)."""


def parse_import_path(text: object) -> tuple[str, str]:
    """``"package.module:function"`` -> (module, attribute path). Private and dunder names are
    refused (``os:__class__`` reaches past the function), and so is anything but ASCII
    identifiers, dots and one colon."""
    if not isinstance(text, str) or not text:
        raise FunctionTrialError(f"a function trial is named 'module:function', got {text!r:.80}")
    if len(text) > MAX_IMPORT_PATH:
        raise FunctionTrialError(f"a function trial's import path is at most {MAX_IMPORT_PATH} characters")
    if not text.isascii() or not _PATH.fullmatch(text):
        raise FunctionTrialError(f"{text!r}: expected 'package.module:function' (Python identifiers, one ':')")
    module, attribute = text.split(":")
    if any(part.startswith("_") for part in (*module.split("."), *attribute.split("."))):
        raise FunctionTrialError(f"{text!r}: private and dunder names are not trial functions")
    return module, attribute


def function_command(import_path: str, python: str = "python3") -> str:
    """The trial command that runs ``import_path`` (checked first) with ``python``."""
    parse_import_path(import_path)
    return f"{shlex.quote(python)} -m trialflow.trial.function {shlex.quote(import_path)}"


def load(import_path: str, folder: str | None = None) -> object:
    """The function ``import_path`` names, imported from ``folder`` (the working directory)."""
    module_name, attribute = parse_import_path(import_path)
    folder = os.path.abspath(folder or os.getcwd())
    if folder not in sys.path:
        sys.path.insert(0, folder)
    target: object = importlib.import_module(module_name)
    for name in attribute.split("."):
        target = getattr(target, name)
    if not callable(target):
        raise FunctionTrialError(f"{import_path!r} is a {type(target).__name__}, not a function")
    return target


def accepted(function: object, inputs: dict[str, object]) -> dict[str, object]:
    """The run's inputs the function takes as keyword arguments: those its signature names
    (all of them when it takes ``**kwargs``); a function of the parameters alone takes none."""
    if not inputs:
        return {}
    try:
        signature = inspect.signature(function)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return {}
    kinds = {p.name: p.kind for p in signature.parameters.values()}
    if inspect.Parameter.VAR_KEYWORD in kinds.values():
        return dict(inputs)
    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return {k: v for k, v in inputs.items() if kinds.get(k) in named}


def run(import_path: str) -> None:
    """Run the function as this trial: parameters (and the run's inputs it names) in, final
    result out."""
    function = load(import_path)
    parameters = trial.get_next_parameter()
    before = trial._state.get("finals", 0)
    result = function(parameters, **accepted(function, dict(read_inputs(os.environ))))  # type: ignore[operator]
    if trial._state.get("finals", 0) > before:
        return  # it reported its final result itself: that one counts, as NNI keeps the first
    if result is None:
        raise FunctionTrialError(
            f"{import_path} returned None: return the final result (a number, or a dict with 'default'), "
            "or report it with trialflow.trial.report_final_result"
        )
    trial.report_final_result(result)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m trialflow.trial.function package.module:function", file=sys.stderr)
        return 2
    try:
        run(argv[0])
    except Exception as exc:
        traceback.print_exc()
        print(f"{type(exc).__name__}: {exc}"[:1000], file=sys.stderr, flush=True)  # the trial's message
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

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


def not_taken(function: object, names: list[str]) -> list[str]:
    """The input names the function's signature takes none of (``accepted`` would drop them:
    the run gives them, the function never sees them)."""
    taken = accepted(function, {name: None for name in names})
    return [name for name in names if name not in taken]


#: Seconds `trialflow validate` gives a trial function's module to import.
CHECK_TIMEOUT = 60.0


def check_function(import_path: str, folder: str, inputs: list[str], python: str | None = None) -> list[str]:
    """Problems of the function trial ``import_path`` as its trials would meet them: its module
    imported from ``folder`` (the trial code folder) in a Python process of its own (the user's
    module runs its top level, which must not run inside the checker), and its signature
    against the run's ``inputs`` (names a function that takes none of them would silently not
    get). Each problem names the module, the folder or the input."""
    import json
    import subprocess

    try:
        parse_import_path(import_path)
    except FunctionTrialError as exc:
        return [str(exc)]
    command = [python or sys.executable, "-m", "trialflow.trial.function", "--check", import_path, json.dumps(inputs)]
    try:
        done = subprocess.run(
            command, cwd=folder, capture_output=True, text=True, timeout=CHECK_TIMEOUT, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired:
        return [f"{import_path}: its module did not import within {CHECK_TIMEOUT:.0f} s from {folder}"]
    except OSError as exc:
        return [f"{import_path}: cannot run Python in {folder}: {exc.strerror or exc}"]
    lines = [line for line in done.stdout.splitlines() if line.startswith(_CHECK_MARK)]
    if not lines:
        said = (done.stderr.strip().splitlines() or ["no answer"])[-1][:300]
        return [f"{import_path}: could not be checked from {folder}: {said}"]
    try:
        report = json.loads(lines[-1][len(_CHECK_MARK) :])
    except ValueError:
        report = None
    if not isinstance(report, dict):  # the module printed a marker of its own and then died
        return [f"{import_path}: could not be checked from {folder}: its module's output was not the checker's"]
    if report.get("error"):
        return [f"{import_path}: {report['error']} (imported from the trial code folder {folder})"]
    return [
        f"{import_path}: its signature takes no argument named {name!r}, which the experiment's inputs "
        f"give every trial: add a parameter {name} (or **inputs), or drop the input"
        for name in report.get("not_taken", [])
    ]


_CHECK_MARK = "trialflow-check:"


def _check(import_path: str, inputs_json: str) -> int:
    """The child's side of check_function: one marked JSON line on stdout."""
    import json

    names = [n for n in json.loads(inputs_json) if isinstance(n, str)]
    try:
        function = load(import_path)
    except ModuleNotFoundError as exc:
        report: dict[str, object] = {"error": f"no module named {exc.name!r}"}
    except Exception as exc:
        report = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
    else:
        report = {"not_taken": not_taken(function, names)}
    print(_CHECK_MARK + json.dumps(report), flush=True)
    return 0


def run(import_path: str) -> None:
    """Run the function as this trial: parameters (and the run's inputs it names) in, final
    result out."""
    function = load(import_path)
    parameters = trial.get_next_parameter()
    before = trial.finals_reported()
    result = function(parameters, **accepted(function, dict(read_inputs(os.environ))))  # type: ignore[operator]
    if trial.finals_reported() > before:
        return  # it reported its final result itself: that one counts, as NNI keeps the first
    if result is None:
        raise FunctionTrialError(
            f"{import_path} returned None: return the final result (a number, or a dict with 'default'), "
            "or report it with trialflow.trial.report_final_result"
        )
    trial.report_final_result(result)


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[0] == "--check":
        return _check(argv[1], argv[2])
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

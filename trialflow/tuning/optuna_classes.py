"""Any Optuna sampler or pruner by its class path, for Optuna users: ``tuner: {name:
optuna.samplers.CmaEsSampler, classArgs: {sigma0: 0.5}}``, ``assessor: {name:
optuna.pruners.PercentilePruner, classArgs: {percentile: 25}}``, or a class of an installed
package (an OptunaHub package, the user's own) that subclasses Optuna's BaseSampler or
BasePruner.

classArgs are the class's keyword arguments, checked by `trialflow validate` against its
signature (an unknown or missing argument is named, as for NNI's names), except
``optimize_mode``, which is the study's direction as everywhere. A ``seed`` the class takes is
the experiment's plus the trial's index, as for NNI's tuners: every trial asks from its own
process, and one seed would draw one point for all of them.

The class's module is imported when the config is checked: the name is the author's, in their
own config, like the DAG file's imports.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import re
from typing import Any

from trialflow.tuning.seeds import trial_seed

#: A dotted Python path: identifiers joined by dots, at least one dot, bounded.
CLASS_PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+")
MAX_PATH = 200
KINDS = {"tuner": ("optuna.samplers", "BaseSampler"), "assessor": ("optuna.pruners", "BasePruner")}


#: Optional packages Optuna's own samplers import only when they first sample (after their
#: startup trials): without them a config would pass validate and fail trials later. By class
#: name, for the classes of ``optuna.samplers``: (module, what to install).
NEEDS: dict[str, tuple[tuple[str, str], ...]] = {
    "CmaEsSampler": (("cmaes", "cmaes"),),
    "GPSampler": (("torch", "torch"), ("scipy", "scipy")),
    "QMCSampler": (("scipy", "scipy"),),
}


class OptunaClassError(ValueError):
    """The class path names no usable Optuna class, or its arguments do not fit."""


def is_class_path(name: str | None) -> bool:
    return name is not None and len(name) <= MAX_PATH and CLASS_PATH.fullmatch(name) is not None


def load(path: str, role: str) -> type:
    """The class at ``path``, checked to be an Optuna sampler (tuner) or pruner (assessor)."""
    if role not in KINDS:
        raise OptunaClassError(
            f"an Optuna class serves as a tuner (a sampler) or an assessor (a pruner), not an {role}"
        )
    module_name, _, class_name = path.rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # not installed, or its import failed: said with the module's words
        raise OptunaClassError(f"{path!r}: module {module_name!r} cannot be imported: {exc}") from exc
    found = getattr(module, class_name, None)
    base_module, base_name = KINDS[role]
    base = getattr(importlib.import_module(base_module), base_name)
    if not (inspect.isclass(found) and issubclass(found, base)):
        what = "no class" if found is None else f"{type(found).__name__}"
        raise OptunaClassError(f"{path!r} is {what}, not a subclass of {base_module}.{base_name}")
    missing = [
        package
        for module, package in (NEEDS.get(found.__name__, ()) if found.__module__.startswith("optuna.") else ())
        if importlib.util.find_spec(module) is None
    ]
    if missing:
        raise OptunaClassError(
            f"{path!r} needs {', '.join(repr(m) for m in missing)}, not installed here "
            f"(pip install {' '.join(missing)}): Optuna imports it when the sampler first samples"
        )
    return found


def keyword_args(cls: type, class_args: dict[str, Any], seed_offset: int | None = None) -> dict[str, Any]:
    """The keyword arguments for ``cls``: classArgs without ``optimize_mode``, checked against
    its signature; with ``seed_offset`` (the trial's index), the seed that trial's
    (trialflow.tuning.seeds)."""
    kwargs = {k: v for k, v in class_args.items() if k != "optimize_mode"}
    try:
        inspect.signature(cls).bind(**kwargs)
    except TypeError as exc:
        known = [p for p in inspect.signature(cls).parameters if p not in ("self", "args", "kwargs")]
        raise OptunaClassError(f"{cls.__name__}: {exc}; it takes {', '.join(known) or 'no arguments'}") from exc
    if seed_offset is not None and isinstance(kwargs.get("seed"), int):
        kwargs["seed"] = trial_seed(kwargs["seed"], seed_offset, f"{cls.__module__}.{cls.__qualname__}")
    return kwargs


def check(path: str, role: str, class_args: dict[str, Any]) -> str | None:
    """What is wrong with this class and its arguments, or None."""
    try:
        build(path, role, class_args)  # made once: a sampler needing a missing package says so now
    except OptunaClassError as exc:
        return str(exc)
    return None


def build(path: str, role: str, class_args: dict[str, Any], trial_index: int | None = None) -> Any:
    """An instance of the class (a sampler seeded for ``trial_index``, or a pruner)."""
    cls = load(path, role)
    kwargs = keyword_args(cls, class_args, trial_index)
    try:
        return cls(**kwargs)
    except Exception as exc:  # its own check of its arguments, or a package it needs
        raise OptunaClassError(f"{path!r} cannot be made with these classArgs: {type(exc).__name__}: {exc}") from exc

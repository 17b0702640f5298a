"""Which DAG file is building an experiment, where its config comes from, and the experiments
a file built while `trialflow validate | convert | render | run` imported it.

A DAG file names its config relative to itself, and a config written in it names the file in
its errors; neither experiment_dag nor ExperimentTaskGroup is handed the file, so the nearest
caller outside trialflow's own modules is taken for it (:func:`dag_file`). The command line
imports a DAG file to find its experiments: every experiment built inside :func:`collecting`
is reported there (a no-op otherwise).
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from trialflow.authoring.plan import Built
from trialflow.config.inline import MARK as INLINE_MARK

#: While the command line imports a DAG file: the experiments it builds, one list per caller.
_collecting: list[list[Built]] = []


@contextmanager
def collecting() -> Iterator[list[Built]]:
    """Collect every experiment built inside the block: how the CLI finds the experiments of a
    DAG file it imports."""
    found: list[Built] = []
    _collecting.append(found)
    try:
        yield found
    finally:
        _collecting.remove(found)


def built(dag_id: str, group: str | None, source: str, inputs: Mapping[str, Any] | None = None) -> None:
    """Tell a collecting caller an experiment was built (a no-op otherwise)."""
    label = dag_id if group is None else f"{dag_id} / {group}"
    for found in _collecting:
        found.append(Built(label, source, tuple(str(name) for name in inputs or ()), dag_id, group))


def dag_file() -> Path | None:
    """The DAG file that is building the experiment: the nearest caller outside trialflow's own
    modules (its folder is where a config's relative path starts; a config written in it names
    it in its errors). None when called from no file (an interactive session)."""
    package = Path(__file__).resolve().parents[1]  # trialflow/, all of it
    frame = inspect.currentframe()
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith("<") and not Path(filename).resolve().is_relative_to(package):
            return Path(filename).resolve()
        frame = frame.f_back
    return None


def config_source(config: str | Path | Mapping[str, Any]) -> str:
    """What the experiment's tasks are handed: a YAML file's absolute path (relative to the DAG
    file), or a config written in the DAG file as its inline form (checked for what JSON cannot
    hold and for secrets, naming the DAG file and the key)."""
    caller = dag_file()
    folder = caller.parent if caller is not None else Path.cwd()
    if isinstance(config, Mapping):
        from trialflow.config.inline import inline_source

        return inline_source(config, caller or Path("<dag file>"), folder)
    if isinstance(config, str) and config.startswith(INLINE_MARK):
        return config
    if not isinstance(config, str | Path):
        raise TypeError(f"config: expected a path to an NNI config or a mapping, got {type(config).__name__}")
    path = Path(config).expanduser()
    return str(path if path.is_absolute() else folder / path)

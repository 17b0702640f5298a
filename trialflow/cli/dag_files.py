"""The experiments a file holds: a config file is one; a DAG file is imported to find them.

`trialflow validate | convert | render | run` all start here: a DAG file (``.py``) is imported
as Airflow would import it, and every experiment_dag and ExperimentTaskGroup it builds says so
(trialflow.authoring.dag_sources.collecting), with its DAG id, its group and its config's source.
"""

from __future__ import annotations

from pathlib import Path

from trialflow.authoring.plan import Built
from trialflow.config import ConfigError


class NoExperiment(Exception):
    """A DAG file that builds no experiment, or cannot be imported (the message says which)."""


def is_dag_file(path: str | Path) -> bool:
    """A Python file (a DAG file), as opposed to an NNI config."""
    return str(path).endswith(".py")


def experiments_in(path: str) -> list[Built]:
    """Each experiment ``path`` holds (label, config source, input names, DAG id, group): a
    config file is one; a DAG file (``.py``) is imported, as Airflow would, and holds every
    experiment_dag and ExperimentTaskGroup it builds (configs written in it included). Raises
    ConfigError for a config of it that does not validate, NoExperiment when there is nothing
    to check."""
    if not is_dag_file(path):
        return [Built(path, path)]
    import runpy

    from trialflow.authoring.dag_sources import collecting

    file = Path(path).expanduser().resolve()
    if not file.is_file():
        raise NoExperiment(f"{path}: file not found")
    with collecting() as found:
        try:
            runpy.run_path(str(file), run_name="__trialflow_check__")
        except ConfigError:
            raise
        except Exception as exc:
            raise NoExperiment(f"{path}: the DAG file did not import: {type(exc).__name__}: {exc}") from None
    if not found:
        raise NoExperiment(f"{path}: builds no experiment (experiment_dag or ExperimentTaskGroup)")
    return found


def dag_of(path: str, found: list[Built], dag_id: str | None) -> str:
    """The DAG of ``path`` to run: ``dag_id`` when given (one that builds an experiment), else
    the only DAG whose experiments ``found`` lists. Raises NoExperiment saying which exist."""
    dags = list(dict.fromkeys(b.dag_id for b in found))
    if dag_id is not None:
        if dag_id not in dags:
            raise NoExperiment(
                f"{path}: --dag-id {dag_id}: no DAG of that id builds an experiment here ({', '.join(dags)})"
            )
        return dag_id
    if len(dags) > 1:
        raise NoExperiment(f"{path}: several DAGs build experiments ({', '.join(dags)}): name one with --dag-id")
    return dags[0]

"""What an experiment's DAG needs from its config, remembered between DAG parses.

Airflow parses a DAG file over and over: the dag-processor every few minutes, and
every task process once more before it runs. Checking an NNI config in full
(pydantic models for every platform, the search space, the platform's preflight)
costs ~0.3 s of imports and work each time, for the same answer. So the full check
runs when the config (or its searchSpaceFile) changed, and its result, the
:class:`DagPlan`, is kept in a small JSON file keyed by the config's path and the
content hashes of the files it read. A parse whose files are unchanged reads the plan
and builds the DAG without importing the config models at all; the start step still
checks the config in full before any trial starts, so a code folder removed since the
last check is still refused before anything runs. Only plans of configs that passed
the check are kept: a broken config is checked (and refused) at every parse.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from trialflow import __version__
from trialflow.config.inline import MARK

if TYPE_CHECKING:
    from trialflow.config import ExperimentConfig

CACHE_ENV = "TRIALFLOW_CACHE_DIR"
#: Bumped when DagPlan's fields or their meaning change (with trialflow's version, in the key).
PLAN_FORMAT = 4


@dataclass(frozen=True)
class DagPlan:
    """The config's answers to the questions a DAG asks: what to name it, how many trials
    per run, how many at once, whether it goes on in follow-on runs, what to say in its doc."""

    config_path: str
    experiment_name: str | None
    trial_count: int
    trial_concurrency: int
    unbounded: bool
    platforms: tuple[str, ...]
    #: Those of ``platforms`` whose registry entries say host-bound (asked once, with the config:
    #: the registry imports the config models, which a kept plan spares every parse).
    host_bound: tuple[str, ...]
    algorithm_kind: str
    algorithm: str | None
    assessor: str | None
    optimize_mode: str
    #: The config names an MLflow server (its ``mlflow`` key): the DAG logs to it to the end.
    tracked: bool = False
    #: The tuner's ask fits a model in the asking process (trialflow.tuning.algorithms.ask_fits_model):
    #: "auto" starts its trial tasks in workers (trialflow.lifecycle.start_place).
    ask_fits_model: bool = False

    @classmethod
    def of(cls, config: ExperimentConfig) -> DagPlan:
        from trialflow.config.registry import is_host_bound
        from trialflow.experiment import trial_count, unbounded
        from trialflow.tuning.algorithms import ask_fits_model

        algorithm = config.tuner or config.advisor
        return cls(
            config_path=config.source,
            experiment_name=config.experiment_name,
            trial_count=trial_count(config),
            trial_concurrency=config.trial_concurrency,
            unbounded=unbounded(config),
            platforms=tuple(config.platform_names),
            host_bound=tuple(sorted({name for name in config.platform_names if is_host_bound(name)})),
            algorithm_kind="advisor" if config.advisor else "tuner",
            algorithm=(algorithm.name or algorithm.class_name) if algorithm else None,
            assessor=(config.assessor.name or config.assessor.class_name) if config.assessor else None,
            optimize_mode=config.optimize_mode,
            tracked=config.mlflow is not None,
            ask_fits_model=ask_fits_model(algorithm, "advisor" if config.advisor else "tuner"),
        )

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> DagPlan:
        return cls(**{**raw, "platforms": tuple(raw["platforms"]), "host_bound": tuple(raw["host_bound"])})


def default_dag_id(config_path: Path, experiment_name: str | None) -> str:
    """The DAG id a config gets unless the DAG file names one: here, not in trialflow.dag, so
    `trialflow run` names its DAG without importing Airflow (~2.8 s of its start-up)."""
    base = experiment_name or config_path.stem
    return "trialflow_" + re.sub(r"[^A-Za-z0-9_.-]+", "_", base).strip("_").lower()


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "trialflow" / "dag-plans").expanduser()


def _entry_path(config_path: Path | str) -> Path:
    key = hashlib.sha256(f"{PLAN_FORMAT}\0{__version__}\0{config_path}".encode()).hexdigest()[:32]
    return cache_dir() / f"{key}.json"


def _digest(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def cached_plan(config_path: Path | str) -> DagPlan | None:
    """The plan kept for this config, if every file it was made from is unchanged (a config
    written in a DAG file is its own key: only its searchSpaceFile, if any, is a file)."""
    try:
        entry = json.loads(_entry_path(config_path).read_text())
        files = entry["files"]
        if not isinstance(files, dict) or (isinstance(config_path, Path) and str(config_path) not in files):
            return None
        if any(_digest(Path(name)) != digest for name, digest in files.items()):
            return None
        return DagPlan.from_json(entry["plan"])
    except (OSError, ValueError, KeyError, TypeError):
        return None  # no entry, or one that does not read back: check the config again


def remember(config: ExperimentConfig) -> DagPlan:
    """Keep the plan of a config that passed the full check (best effort: a read-only cache
    folder only means the next parse checks again)."""
    plan = DagPlan.of(config)
    assert config.source_file is not None
    own = [] if config.inline_source else [config.source_file]
    sources = own + ([Path(config.search_space_file)] if config.search_space_file else [])
    files = {str(p): _digest(p) for p in sources}
    if None in files.values():
        return plan
    target = _entry_path(config.inline_source or config.source_file)
    written: str | None = None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=target.parent, suffix=".tmp", delete=False) as out:
            written = out.name
            json.dump({"files": files, "plan": asdict(plan)}, out)
        os.replace(written, target)  # whole or not at all: a parse never reads half an entry
    except OSError:
        if written is not None:
            Path(written).unlink(missing_ok=True)
    return plan


def load_plan(config_path: str | Path) -> DagPlan:
    """The DAG plan of a config: kept from an earlier full check of the same files, or from a
    full check now (which raises ConfigError for a config that cannot run)."""
    inline = isinstance(config_path, str) and config_path.startswith(MARK)
    path = config_path if inline else Path(config_path).expanduser().resolve()
    plan = cached_plan(path)
    if plan is not None:
        return plan
    from trialflow.experiment import load_runnable_config

    return remember(load_runnable_config(path))


class Built(NamedTuple):
    """An experiment a DAG file built, as the CLI checks and runs it: a label (the DAG id and
    group), the config's source, the names of the inputs its runs hand the trials, and where it
    sits (its DAG, its task group: None for a whole experiment DAG)."""

    label: str
    source: str
    inputs: tuple[str, ...] = ()
    dag_id: str = ""
    group: str | None = None

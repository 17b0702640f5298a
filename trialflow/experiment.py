"""One experiment at run time, without Airflow: ids, folders, tuner, platform, results.

The operators, the sensor, the trigger and the CLI are thin shells around this
module, so everything an experiment does can be driven and tested without a
scheduler.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from trialflow.config import (
    ExperimentConfig,
    effective_code_directory,
    effective_gpu_number,
    effective_trial_command,
    load_config,
    to_v2_dict,
)
from trialflow.config.errors import ConfigError, Problem
from trialflow.platforms.base import (
    TrainingPlatform,
    TrialHandle,
    TrialSpec,
    TrialStatus,
    experiment_id_for,
    trial_id_for,
)
from trialflow.platforms.registry import PlatformUnavailable, get_platform_entry
from trialflow.tuning.search_space import SearchSpace, parse_search_space

log = logging.getLogger(__name__)

#: Trials when a config sets no maxTrialNumber: a DAG needs a finite fan-out.
DEFAULT_MAX_TRIALS = 100
WORKDIR_ENV = "TRIALFLOW_WORKDIR"


def default_workdir() -> Path:
    """Like NNI's ~/nni-experiments; `trialflow run` points it into its private home."""
    return Path(os.environ.get(WORKDIR_ENV) or Path.home() / "trialflow-experiments").expanduser()


def check_runnable(config: ExperimentConfig) -> list[Problem]:
    """What would stop this (valid) config from running here: unsupported algorithm, platform
    without a runner, GPU requests. Empty when the experiment can run."""
    from trialflow.tuning.algorithms import check_algorithms

    file = config.source_file
    problems = [Problem(file, tuple(key.split(".")), msg)
                for key, msg in check_algorithms(config.tuner, config.advisor, config.assessor,
                                                 parse_search_space(config.search_space))]
    if len(config.training_service) > 1:
        problems.append(Problem(file, ("trainingService",),
                                "hybrid mode (a list of platforms) is not supported yet; give one platform"))
    for i, service in enumerate(config.training_service):
        try:
            get_platform_entry(service.platform).load()
        except PlatformUnavailable as exc:
            problems.append(Problem(file, ("trainingService", "platform"), str(exc)))
        code_dir = effective_code_directory(config, i)
        if service.platform == "local" and not code_dir.is_dir():
            problems.append(Problem(file, ("trialCodeDirectory",),
                                    f"the trial code directory {code_dir} does not exist"))
        if effective_gpu_number(config, i) > 0 and service.platform == "local":
            problems.append(Problem(file, ("trialGpuNumber",),
                                    "GPU scheduling is not supported yet; set trialGpuNumber: 0"))
    return problems


def load_runnable_config(path: str | Path) -> ExperimentConfig:
    config = load_config(path)
    problems = check_runnable(config)
    if problems:
        raise ConfigError(problems)
    return config


def trial_count(config: ExperimentConfig) -> int:
    if config.max_trial_number is not None:
        return config.max_trial_number
    if config.tuner is not None and str(config.tuner.name).lower() in ("gridsearch", "grid"):
        return len(parse_search_space(config.search_space).grid())
    return DEFAULT_MAX_TRIALS


@dataclass
class Experiment:
    """A config bound to one run: its id, folder, tuner and platform."""

    config: ExperimentConfig
    experiment_id: str
    workdir: Path

    @classmethod
    def for_run(cls, config_path: str | Path, dag_id: str, run_id: str,
                workdir: Path | None = None) -> "Experiment":
        config = load_runnable_config(config_path)
        return cls(config, experiment_id_for(dag_id, run_id),
                   Path(workdir or config.experiment_working_directory or default_workdir()))

    @property
    def directory(self) -> Path:
        return self.workdir / self.experiment_id

    @cached_property
    def space(self) -> SearchSpace:
        return parse_search_space(self.config.search_space)

    def platform(self, service_index: int = 0) -> TrainingPlatform:
        service = self.config.training_service[service_index]
        implementation = get_platform_entry(service.platform).load()
        return implementation.from_config(service, self.directory)

    def description(self) -> dict[str, Any]:
        """What the store keeps about the experiment (secrets masked by the config model)."""
        return {"config": to_v2_dict(self.config), "config_file": str(self.config.source_file),
                "experiment_name": self.config.experiment_name, "optimize_mode": self.config.optimize_mode,
                "platform": self.config.platform_names[0], "directory": str(self.directory)}

    def trial_spec(self, trial_index: int, parameter_id: int, parameters: dict[str, Any],
                   service_index: int = 0) -> TrialSpec:
        command = effective_trial_command(self.config, service_index) or ""
        return TrialSpec(
            experiment_id=self.experiment_id,
            trial_id=trial_id_for(self.experiment_id, trial_index),
            sequence=trial_index,
            parameter_id=parameter_id,
            parameters=parameters,
            command=command,
            code_dir=effective_code_directory(self.config, service_index),
            gpu_number=effective_gpu_number(self.config, service_index),
        )


def trial_result(trial_index: int, trial_id: str, parameters: dict[str, Any], status: TrialStatus,
                 final_metric: Any, intermediate_count: int, handle: TrialHandle | None = None,
                 message: str | None = None) -> dict[str, Any]:
    """The small dict a trial task returns as its XCom."""
    return {"trial_index": trial_index, "trial_id": trial_id, "parameters": parameters,
            "status": status.value, "final_metric": final_metric,
            "intermediate_count": intermediate_count, "message": message,
            "platform": (handle or {}).get("platform")}

"""The validated experiment: one model for NNI v2 configs and converted v1 configs."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SerializeAsAny, field_validator, model_validator

from trialflow.config.base import ConfigPath, GpuIndices, Int, NniModel, Seconds, Secret, Str
from trialflow.config.platforms import TrainingServiceConfig
from trialflow.limits import MAX_TRIALS_PER_RUN

#: The largest fan-out one DAG run is given (one mapped task instance per trial).


class AlgorithmConfig(NniModel):
    """A tuner, assessor or advisor: a built-in ``name`` or a custom ``className``."""

    name: str | None = None
    class_name: str | None = None
    code_directory: ConfigPath | None = None
    class_args: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _name_or_class(self) -> AlgorithmConfig:
        if (self.name is None) == (self.class_name is None):
            raise ValueError("set name (a built-in algorithm) or className (a custom one), exactly one")
        return self

    @field_validator("class_args", mode="before")
    @classmethod
    def _none_is_empty(cls, value: Any) -> Any:
        return {} if value is None else value

    @property
    def optimize_mode(self) -> Literal["maximize", "minimize"]:
        mode = str(self.class_args.get("optimize_mode", "maximize")).lower()
        return "minimize" if mode == "minimize" else "maximize"


class SharedStorageConfig(NniModel):
    """NNI v2 sharedStorage (NFS or AzureBlob): storage the machines see at remoteMountPoint."""

    storage_type: Literal["NFS", "AzureBlob"]
    local_mount_point: ConfigPath
    remote_mount_point: str
    local_mounted: Literal["usermount", "nnimount", "nomount"]
    nfs_server: str | None = None
    exported_directory: str | None = None
    storage_account_name: str | None = None
    storage_account_key: Secret | None = None
    container_name: str | None = None
    resource_group_name: str | None = None

    @field_validator("storage_type", mode="before")
    @classmethod
    def _case(cls, value: Any) -> Any:
        lookup = {"nfs": "NFS", "azureblob": "AzureBlob"}
        return lookup.get(str(value).lower(), value)

    @model_validator(mode="after")
    def _complete(self) -> SharedStorageConfig:
        need = (
            ("nfs_server", "exported_directory")
            if self.storage_type == "NFS"
            else ("storage_account_name", "container_name")
        )
        missing = [self.model_fields[n].alias for n in need if getattr(self, n) is None]
        if missing:
            raise ValueError(f"storageType {self.storage_type} needs {', '.join(map(str, missing))}")
        return self


class ExperimentConfig(NniModel):
    """An NNI experiment, validated. ``trainingService`` is always a list (one item unless hybrid)."""

    experiment_name: str | None = None
    search_space: dict[str, Any] | None = None
    search_space_file: ConfigPath | None = None
    trial_command: Str | None = None
    trial_code_directory: ConfigPath = Field(default=Path("."), validate_default=True)
    trial_concurrency: Int = Field(gt=0)
    trial_gpu_number: Int | None = Field(default=None, ge=0)
    max_experiment_duration: Seconds | None = None
    max_trial_number: Int | None = Field(default=None, gt=0)
    max_trial_duration: Seconds | None = None
    nni_manager_ip: str | None = None
    use_annotation: bool = False
    debug: bool = False
    log_level: Literal["critical", "error", "warning", "info", "debug", "trace"] | None = None
    experiment_working_directory: ConfigPath | None = None
    tuner_gpu_indices: GpuIndices = None
    tuner: AlgorithmConfig | None = None
    assessor: AlgorithmConfig | None = None
    advisor: AlgorithmConfig | None = None
    training_service: list[SerializeAsAny[TrainingServiceConfig]]
    shared_storage: SharedStorageConfig | None = None
    #: trialflow's own key (NNI has no schedules): what each run of a scheduled experiment DAG
    #: is. ``new``: a new experiment per run. ``continue``: one study across runs, each run adding
    #: maxTrialNumber trials whose tuner sees every earlier run's results (a warm start).
    scheduled_runs: Literal["new", "continue"] = "new"

    #: Where the config came from (not a config key); relative paths were resolved against it.
    source_file: Path | None = Field(default=None, exclude=True)

    @field_validator("max_trial_number")
    @classmethod
    def _within_one_run(cls, value: int | None) -> int | None:
        if value is not None and value > MAX_TRIALS_PER_RUN:
            raise ValueError(
                f"at most {MAX_TRIALS_PER_RUN} trials per DAG run (each is a mapped task instance), "
                f"got {value}; for more, run the DAG again with scheduledRuns: continue (each run "
                "adds maxTrialNumber trials to the same experiment)"
            )
        return value

    @field_validator("log_level", mode="before")
    @classmethod
    def _lower(cls, value: Any) -> Any:
        return value.lower() if isinstance(value, str) else value

    @property
    def platform_names(self) -> list[str]:
        return [service.platform for service in self.training_service]

    @property
    def optimize_mode(self) -> Literal["maximize", "minimize"]:
        algorithm = self.advisor or self.tuner
        return algorithm.optimize_mode if algorithm else "maximize"

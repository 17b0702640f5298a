"""The validated experiment: one model for NNI v2 configs and converted v1 configs."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SerializeAsAny, ValidationInfo, field_validator, model_validator

from trialflow.config.base import ConfigPath, GpuIndices, Int, NniModel, Seconds, Secret, Str
from trialflow.config.checkpoints import CheckpointsConfig
from trialflow.config.platforms import TrainingServiceConfig
from trialflow.config.tracking import MlflowConfig
from trialflow.limits import MAX_TRIALS_PER_RUN
from trialflow.trial.function import function_command, parse_import_path

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
    def population_based(self) -> bool:
        """Whether this is NNI's PBTTuner (by either of its names): its trials keep and load
        checkpoints, so the experiment keeps them even without a ``checkpoints`` key."""
        key = (self.name or "").replace("_", "").replace(" ", "").replace("-", "").lower()
        return self.class_name is None and key in ("pbt", "pbttuner")

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


#: Keys of trialflow's own beside NNI's schema (a v1 config, NNI's schema only, refuses them).
TRIALFLOW_KEYS = ("scheduledRuns", "retuneTopK", "objectives", "trialFunction", "warmStart", "checkpoints", "mlflow")

#: How many of the previous experiment's best parameter sets a re-tuning run evaluates first.
DEFAULT_RETUNE_TOP_K = 5


class WarmStartConfig(NniModel):
    """trialflow's ``warmStart`` key: a new experiment starts from an earlier one of the same
    DAG (an NNI experiment imported under it, or one of its own), as NNI's ``nnictl experiment
    import`` fed earlier results to a tuner. ``use: results`` trusts the numbers: the tuner
    learns from the earlier successful trials as if they had run here (they are no trials of
    this experiment). ``use: rerun`` trusts only the parameters: the earlier ``topK`` best sets
    run first, measured again (the data or the code changed), as ``scheduledRuns: retune`` does."""

    #: The store experiment to start from (an id as `trialflow experiments` lists it).
    experiment: str = Field(pattern=r"^[a-z0-9][a-z0-9-]{0,62}$")
    use: Literal["results", "rerun"] = "results"
    top_k: Int | None = Field(default=None, gt=0)

    @field_validator("top_k")
    @classmethod
    def _only_when_rerunning(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value is not None and info.data.get("use") != "rerun":
            raise ValueError("only with use: rerun (use: results gives the tuner every earlier result)")
        return value


class ObjectiveConfig(NniModel):
    """One of several objectives: a key of the trial's final result dict and its direction."""

    metric: str = Field(min_length=1)
    mode: Literal["maximize", "minimize"]

    @field_validator("mode", mode="before")
    @classmethod
    def _lower(cls, value: Any) -> Any:
        return value.lower() if isinstance(value, str) else value


class ExperimentConfig(NniModel):
    """An NNI experiment, validated. ``trainingService`` is always a list (one item unless hybrid)."""

    experiment_name: str | None = None
    search_space: dict[str, Any] | None = None
    search_space_file: ConfigPath | None = None
    trial_command: Str | None = None
    #: trialflow's own key: a Python function as the trial (``package.module:function``, imported
    #: from trialCodeDirectory on the machine that runs it, never pickled); it runs as the
    #: command ``python3 -m trialflow.trial.function ...`` on every platform (trialflow.trial.function).
    trial_function: Str | None = None
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
    #: ``retune``: a new experiment per run (for a DAG scheduled on a data Asset) whose first
    #: trials re-evaluate the previous experiment's ``retuneTopK`` best parameter sets on the new
    #: data: the tuner starts from what was good without trusting metrics measured on old data.
    scheduled_runs: Literal["new", "continue", "retune"] = "new"
    retune_top_k: Int | None = Field(default=None, gt=0)
    #: trialflow's own key: two or more metrics of the final result dict, each maximized or
    #: minimized; "best" becomes the Pareto set (Optuna's multi-objective studies underneath).
    objectives: list[ObjectiveConfig] | None = None
    #: trialflow's own key: start from an earlier experiment of the DAG (WarmStartConfig).
    warm_start: WarmStartConfig | None = None
    #: trialflow's own key: where trials keep checkpoints, how many, and restarts from the last
    #: one after a fault (trialflow.config.checkpoints.CheckpointsConfig).
    checkpoints: CheckpointsConfig | None = None
    #: trialflow's own key: the MLflow tracking server each trial is logged to as a nested run
    #: of the experiment's (trialflow.config.tracking.MlflowConfig); off without it.
    mlflow: MlflowConfig | None = None

    #: Where the config came from (not a config key); relative paths were resolved against it.
    source_file: Path | None = Field(default=None, exclude=True)
    #: A config written in a DAG file (trialflow.config.inline): the string its tasks carry
    #: instead of a path (``source_file`` is then the DAG file, for messages).
    inline_source: str | None = Field(default=None, exclude=True)

    @property
    def source(self) -> str:
        """What the experiment's tasks are handed to load this config again: its file's path,
        or the inline config itself."""
        return self.inline_source or str(self.source_file)

    @field_validator("trial_function")
    @classmethod
    def _import_path(cls, value: str | None) -> str | None:
        if value is not None:
            parse_import_path(value)  # FunctionTrialError is a ValueError: pydantic names the key
        return value

    @property
    def function_command(self) -> str | None:
        """The command that runs trialFunction (None: the trial is trialCommand)."""
        return function_command(self.trial_function) if self.trial_function else None

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

    @field_validator("objectives")
    @classmethod
    def _several(cls, value: list[ObjectiveConfig] | None) -> list[ObjectiveConfig] | None:
        if value is None:
            return None
        if len(value) < 2:
            raise ValueError(
                "expected two or more objectives; for one, report a number and set the tuner's classArgs.optimize_mode"
            )
        names = [o.metric for o in value]
        if len(set(names)) != len(names):
            raise ValueError(f"each objective names a different metric, got {names}")
        return value

    @field_validator("scheduled_runs")
    @classmethod
    def _retune_needs_a_tuner_that_takes_points(cls, value: str, info: ValidationInfo) -> str:
        tuner = info.data.get("tuner") or info.data.get("advisor")
        name = (tuner.name or "") if isinstance(tuner, AlgorithmConfig) else ""
        if value == "retune" and name.replace("_", "").lower() in ("gridsearch", "batchtuner"):
            raise ValueError(
                f"retune queues earlier parameter sets as the first trials, and {name} runs its own points in order"
            )
        return value

    @field_validator("retune_top_k")
    @classmethod
    def _only_when_retuning(cls, value: int | None, info: ValidationInfo) -> int | None:
        mode = info.data.get("scheduled_runs", "new")
        if value is not None and mode != "retune":
            raise ValueError(f"only with scheduledRuns: retune (this config has {mode})")
        return value

    @field_validator("warm_start")
    @classmethod
    def _not_with_retune(cls, value: WarmStartConfig | None, info: ValidationInfo) -> WarmStartConfig | None:
        if value is not None and info.data.get("scheduled_runs") == "retune":
            raise ValueError(
                "scheduledRuns: retune starts each experiment from the DAG's previous one; "
                "warmStart names one to start from: choose one of the two"
            )
        return value

    @model_validator(mode="after")
    def _population_based_training_keeps_checkpoints(self) -> ExperimentConfig:
        # NNI's PBT example has no checkpoints key (NNI used a folder on a shared disk): its
        # trials hand weights on, so the experiment keeps them in the default store.
        if self.checkpoints is None and self.tuner is not None and self.tuner.population_based:
            self.checkpoints = CheckpointsConfig()
        return self

    @property
    def top_k(self) -> int:
        """How many parameter sets a re-tuning run takes over (capped by its trials)."""
        k = self.retune_top_k or DEFAULT_RETUNE_TOP_K
        return min(k, self.max_trial_number) if self.max_trial_number else k

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

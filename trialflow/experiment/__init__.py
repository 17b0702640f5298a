"""One experiment at run time, without Airflow: ids, folders, tuner, platform, results.

The operators, the sensor, the trigger and the CLI are thin shells around this
module, so everything an experiment does can be driven and tested without a
scheduler.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from trialflow.config import (
    ExperimentConfig,
    effective_code_directory,
    effective_gpu_number,
    effective_trial_command,
    load_config,
    to_v2_dict,
)
from trialflow.config.checkpoints import ARTIFACT_STORE_ATTR, ArtifactStore
from trialflow.config.errors import ConfigError, Problem
from trialflow.config.model import AlgorithmConfig
from trialflow.config.registry import PlatformUnavailable, get_platform_entry
from trialflow.config.search_space import SearchSpace, parse_search_space
from trialflow.experiment.run_windows import RunWindow, RunWindows
from trialflow.limits import MAX_TRIALS_PER_RUN
from trialflow.platforms.base import (
    Connections,
    TrainingPlatform,
    TrialHandle,
    TrialSpec,
    TrialStatus,
    experiment_id_for,
    trial_id_for,
)

if TYPE_CHECKING:
    from optuna.pruners import BasePruner

    from trialflow.store.experiment_store import ExperimentStore, TrialRecord

log = logging.getLogger(__name__)

#: Trials one DAG run holds when a config sets no maxTrialNumber (at least this many, and ten
#: waves of trialConcurrency): a DAG needs a finite fan-out, so the experiment goes on in
#: follow-on runs of the same DAG (trialflow.runs.continuation), never stopping at a silent cap.
UNBOUNDED_TRIALS_PER_RUN = 100
UNBOUNDED_WAVES_PER_RUN = 10
EXPERIMENT_ID = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")
#: Study user attribute holding the limits a person changed while it ran (trialflow.steering).
LIMITS_ATTR = "limits"
WORKDIR_ENV = "TRIALFLOW_WORKDIR"


def default_home(config_path: Path) -> Path:
    """Where `trialflow run` keeps its private Airflow, store and trial folders for a config."""
    from trialflow.trial.packing import OWN_FOLDER  # never staged with the code beside it

    return config_path.resolve().parent / OWN_FOLDER


def run_workdir(config: ExperimentConfig, home: Path) -> Path:
    """The trial folders' root of a `trialflow run` in ``home``: the config's
    experimentWorkingDirectory, else ``home/experiments`` (what run and render both use)."""
    return Path(config.experiment_working_directory or home / "experiments")


def default_workdir() -> Path:
    """Like NNI's ~/nni-experiments; `trialflow run` points it into its private home."""
    return Path(os.environ.get(WORKDIR_ENV) or Path.home() / "trialflow-experiments").expanduser()


def _checkpoints_problems(config: ExperimentConfig) -> list[Problem]:
    """The ``checkpoints`` key (or PBT, which implies it) on a platform trialflow cannot keep
    them for, as configured (each platform says, TrainingPlatform.checkpoints_refused)."""
    from trialflow.config.registry import PlatformUnavailable, get_platform_entry

    problems = []
    for index, service in enumerate(config.training_service):
        try:
            why = get_platform_entry(service.platform).load().checkpoints_refused(service)
        except PlatformUnavailable:
            continue  # said by the platform's own check
        if why:
            key: tuple[str | int, ...] = ("checkpoints",)
            if len(config.training_service) > 1:
                key = ("trainingService", index)
            remedy = "remove the key, or run there without it"
            if config.tuner is not None and config.tuner.population_based:
                remedy = "PBTTuner hands checkpoints on, so it needs a platform that keeps them"
            problems.append(Problem(config.source_file, key, f"{why}: {remedy}"))
    return problems


def check_runnable(config: ExperimentConfig) -> list[Problem]:
    """What would stop this (valid) config from running here: unsupported algorithm, platform
    without a runner, GPU requests. Empty when the experiment can run."""
    from trialflow.tuning.algorithms import check_algorithms, check_warm_start

    file = config.source_file
    problems = [
        Problem(file, tuple(key.split(".")), msg)
        for key, msg in check_algorithms(
            config.tuner,
            config.advisor,
            config.assessor,
            parse_search_space(config.search_space),
            len(config.objectives or ()) or 1,
        )
    ]
    if config.warm_start is not None:
        problems += [
            Problem(file, tuple(key.split(".")), msg)
            for key, msg in check_warm_start(config.tuner or config.advisor, config.warm_start.use)
        ]
    if config.checkpoints is not None:
        problems += _checkpoints_problems(config)
    shared = config.shared_storage
    if shared is not None and shared.local_mounted == "nnimount":
        source = (
            f"{shared.nfs_server}:{shared.exported_directory}"
            if shared.storage_type == "NFS"
            else f"the container {shared.container_name}"
        )
        problems.append(
            Problem(
                file,
                ("sharedStorage", "localMounted"),
                f"trialflow never runs `sudo mount`: mount {source} at {shared.local_mount_point} "
                "yourself and set localMounted: usermount (or nomount to upload the code instead)",
            )
        )
    if not any(p.key_path[:1] in (("tuner",), ("advisor",)) for p in problems):
        count, points = trial_count(config), tuner_points(config)
        algorithm = config.tuner or config.advisor
        if algorithm is not None and points is not None and count == points and points > MAX_TRIALS_PER_RUN:
            problems.append(
                Problem(
                    file,
                    ("maxTrialNumber",),
                    f"the {algorithm.name} "
                    f"space has {points} points, more than the {MAX_TRIALS_PER_RUN} trials one DAG "
                    "run holds: set maxTrialNumber (trial i runs point i), and scheduledRuns: "
                    "continue to go on in later runs",
                )
            )
    for i, service in enumerate(config.training_service):
        try:
            implementation: type[TrainingPlatform[Any]] = get_platform_entry(service.platform).load()
        except PlatformUnavailable as exc:
            problems.append(Problem(file, ("trainingService", "platform"), str(exc)))
            continue
        section: tuple[str | int, ...] = (
            ("trainingService",) if len(config.training_service) == 1 else ("trainingService", i)
        )
        platform = implementation.from_config(service, Path("."))
        platform.use_shared_storage(config.shared_storage)
        for path, message in platform.preflight(effective_code_directory(config, i), config_files(config)):
            # trialCodeDirectory is a top-level key unless the section sets its own
            top_level = path[:1] == ("trialCodeDirectory",) and service.trial_code_directory is None
            problems.append(Problem(file, tuple(path) if top_level else section + tuple(path), message))
    return problems


def config_files(config: ExperimentConfig) -> tuple[Path, ...]:
    """The experiment's own config file: never uploaded with the code (it may hold secrets)."""
    return (config.source_file,) if config.source_file is not None else ()


def load_runnable_config(path: str | Path) -> ExperimentConfig:
    config = load_config(path)
    problems = check_runnable(config)
    if problems:
        raise ConfigError(problems)
    return config


def tuner_points(config: ExperimentConfig) -> int | None:
    """How many points GridSearch or BatchTuner has (computed, never listed); None for tuners
    that sample or algorithms that cannot run."""
    from trialflow.config.search_space import SearchSpaceError
    from trialflow.tuning.algorithms import UnsupportedAlgorithm, batch_combinations, canonical_tuner_name

    algorithm = config.tuner or config.advisor
    try:
        name = canonical_tuner_name(algorithm) if algorithm is not None else None
        space = parse_search_space(config.search_space)
        if name == "GridSearch":
            return space.grid().size
        if name == "BatchTuner":
            return len(batch_combinations(space))
    except (UnsupportedAlgorithm, SearchSpaceError):
        return None  # check_runnable reports it
    return None


def trial_count(config: ExperimentConfig) -> int:
    """Trials one run starts (maxTrialNumber counts started trials, as in NNI). GridSearch and
    BatchTuner stop when their points run out, as NNI's do."""
    points = tuner_points(config)
    if points is None:
        if config.max_trial_number:
            return config.max_trial_number
        waves = UNBOUNDED_WAVES_PER_RUN * config.trial_concurrency
        return min(MAX_TRIALS_PER_RUN, max(UNBOUNDED_TRIALS_PER_RUN, waves))
    return min(config.max_trial_number, points) if config.max_trial_number else points


def unbounded(config: ExperimentConfig) -> bool:
    """No maxTrialNumber and a tuner that never runs out: as in NNI, trials keep coming until
    maxExperimentDuration (or until someone stops the experiment), over as many DAG runs as it takes."""
    return not config.max_trial_number and tuner_points(config) is None


#: The experiment attribute naming its task group (absent: the whole DAG's experiment).
GROUP_ATTR = "task_group"
#: A run's conf key naming, per task group, the experiment each group drives.
GROUPS_CONF_KEY = "experiments"


def named_experiment(conf: dict[str, Any] | None, group: str | None = None) -> tuple[str, Any] | None:
    """The experiment a run's conf names for a whole-DAG experiment (``experiment_id``) or for
    task group ``group`` (``experiments: {group: id}``, else ``experiment_id``): (the conf key
    as a person would write it, the value), or None when the conf names none."""
    conf = conf or {}
    if group is not None:
        per_group = conf.get(GROUPS_CONF_KEY)
        if per_group is not None and not isinstance(per_group, dict):
            raise ValueError(
                f"dag run conf {GROUPS_CONF_KEY}: expected a mapping of task group id -> experiment id, "
                f"got {type(per_group).__name__}"
            )
        if per_group and per_group.get(group):
            return f"{GROUPS_CONF_KEY}.{group}", per_group[group]
    named = conf.get("experiment_id")
    return ("experiment_id", named) if named else None


def experiment_id_for_run(
    config: ExperimentConfig,
    dag_id: str,
    run_id: str,
    conf: dict[str, Any] | None = None,
    group: str | None = None,
) -> str:
    """Which experiment a DAG run drives: one named in the run's conf (``experiment_id``, e.g.
    to resume an older one; per task group ``experiments``), one study for the whole DAG or
    group (scheduledRuns: continue), or its own."""
    named = named_experiment(conf, group)
    if named:
        key, value = named
        if not isinstance(value, str) or not EXPERIMENT_ID.fullmatch(value):
            raise ValueError(f"dag run conf {key}: expected lowercase letters, digits and '-', got {value!r}")
        return value
    if config.scheduled_runs == "continue":
        return experiment_id_for(dag_id, "", group)
    return experiment_id_for(dag_id, run_id, group)


@dataclass
class Experiment:
    """A config bound to one run: its id, folder, tuner and platform."""

    config: ExperimentConfig
    experiment_id: str
    workdir: Path
    #: The task group whose experiment this is, in a DAG that may hold several (None: the
    #: whole DAG's, experiment_dag). The experiment belongs to (DAG, group).
    group: str | None = None

    @classmethod
    def for_run(
        cls,
        config_path: str | Path,
        dag_id: str,
        run_id: str,
        workdir: Path | None = None,
        conf: dict[str, Any] | None = None,
        check: bool = True,
        group: str | None = None,
    ) -> Experiment:
        """``check``: the full runnability check (walks, on Kubernetes packs, the code folder);
        DAG parsing and the start step do it, a trial task or trigger only loads the config."""
        config = load_runnable_config(config_path) if check else load_config(config_path)
        return cls(
            config,
            experiment_id_for_run(config, dag_id, run_id, conf, group),
            Path(workdir or config.experiment_working_directory or default_workdir()),
            group,
        )

    @property
    def algorithm(self) -> AlgorithmConfig:
        """The tuner, or the advisor (which chooses parameters too)."""
        algorithm = self.config.tuner or self.config.advisor
        assert algorithm is not None  # the loader requires one
        return algorithm

    @property
    def population_based(self) -> bool:
        """Population Based Training (trialflow.tuning.pbt): its trials wait for their
        generation, start from a parent's checkpoint and keep NNI's save folder."""
        return self.algorithm.population_based

    @cached_property
    def pruner(self) -> BasePruner | None:
        from trialflow.tuning.assessors import make_pruner

        return make_pruner(self.config)

    def open(self, store: ExperimentStore) -> None:
        """Create the experiment in the store, or re-open it (a cleared or continued run)."""
        store.open_experiment(self.experiment_id, self.config.optimize_mode, self.objectives)

    @property
    def objectives(self) -> list[dict[str, str]] | None:
        """Several objectives (trialflow's key) as the store keeps them; None for NNI's one."""
        chosen = self.config.objectives
        return [{"metric": o.metric, "mode": o.mode} for o in chosen] if chosen else None

    def window(self, store: ExperimentStore, run_id: str) -> RunWindow:
        """The trial indexes and deadline that DAG run ``run_id`` owns."""
        return RunWindows(store, self.experiment_id).get(run_id)

    def max_trial_number(self, store: ExperimentStore) -> int | None:
        """maxTrialNumber as a person changed it while the experiment ran (None: unchanged)."""
        changed = store.experiment_attr(self.experiment_id, LIMITS_ATTR) or {}
        value = changed.get("maxTrialNumber")
        return None if value is None else int(value)

    def early_stop_check(self, store: ExperimentStore, storage_id: int) -> Callable[[], str | None] | None:
        """The assessor as a follow-loop check, or None when the experiment has none."""
        pruner = self.pruner
        if pruner is None:
            return None
        from trialflow.tuning.asker import judge
        from trialflow.tuning.assessors import stop_reason

        judged: list[int | None] = [None]  # the newest step judged: each look judges the steps after it

        def check() -> str | None:
            judgment = judge(store, self.experiment_id, storage_id, pruner, after=judged[0])
            judged[0] = judgment.judged_through
            return None if judgment.stop_at is None else stop_reason(self.config, judgment.stop_at)

        return check

    @property
    def directory(self) -> Path:
        return self.workdir / self.experiment_id

    @cached_property
    def space(self) -> SearchSpace:
        return parse_search_space(self.config.search_space)

    def platform(self, service_index: int = 0, connections: Connections | None = None) -> TrainingPlatform[Any]:
        """The platform of listed training service ``service_index``; ``connections`` opens what
        the config names by Airflow connection (the Airflow layer passes them)."""
        service = self.config.training_service[service_index]
        implementation: type[TrainingPlatform[Any]] = get_platform_entry(service.platform).load()
        platform = implementation.from_config(service, self.directory, connections)
        platform.use_shared_storage(self.config.shared_storage)
        return platform

    def choose_service(self, active_trials: Iterable[TrialRecord], trial_index: int) -> int:
        """NNI's hybrid mode: the listed platform with the fewest of ``active_trials`` (this
        experiment's, submitted and not ended: read with the start's state); ties go
        round-robin by trial index."""
        count = len(self.config.training_service)
        if count == 1:
            return 0
        active = [0] * count
        for trial in active_trials:
            if trial.service_index is not None and trial.handle and 0 <= int(trial.service_index) < count:
                active[int(trial.service_index)] += 1
        return min(range(count), key=lambda i: (active[i], (i - trial_index) % count))

    def description(self) -> dict[str, Any]:
        """What the store keeps about the experiment (secrets masked by the config model)."""
        return {
            "config": to_v2_dict(self.config),
            "config_file": str(self.config.source_file),
            "experiment_name": self.config.experiment_name,
            "optimize_mode": self.config.optimize_mode,
            "platform": ", ".join(self.config.platform_names),
            "directory": str(self.directory),
            # where its trials' checkpoints and artifacts are (the pages and a downstream DAG
            # read them there, through the connection)
            **({ARTIFACT_STORE_ATTR: asdict(self.artifact_store())} if self.config.checkpoints is not None else {}),
        }

    def artifact_store(self) -> ArtifactStore:
        """The checkpoints' store: its URL (the default folder's too) and its connection id."""
        assert self.config.checkpoints is not None
        return ArtifactStore(self.config.checkpoints.store_url(self.workdir), self.config.checkpoints.conn_id)

    def _local_function_command(self, service_index: int) -> str | None:
        """A function trial on the local platform runs with this process's Python, the one that
        runs the task and has trialflow, not whatever ``python3`` is first on PATH: a worker
        started from a virtualenv that is not activated (a service, a full path to airflow,
        ``dag.test()`` from ``.venv/bin/python``) failed every function trial with "No module
        named 'trialflow'". Other platforms run their own Python (a machine's pythonPath, an
        image's), and NNI's YAML says ``python3`` (``trialflow convert``)."""
        service = self.config.training_service[service_index]
        function = self.config.trial_function
        if not function or service.trial_command or self.config.trial_command:
            return None
        if self.config.platform_names[service_index] != "local":
            return None
        import sys

        from trialflow.trial.function import function_command

        return function_command(function, python=sys.executable)

    def trial_spec(
        self,
        trial_index: int,
        parameter_id: int,
        parameters: dict[str, Any],
        service_index: int = 0,
        parameter_source: str = "algorithm",
        inputs: Mapping[str, Any] | None = None,
    ) -> TrialSpec:
        """Trial ``trial_index``'s submission; ``inputs``: its run's (trialflow.trial.inputs),
        in its environment."""
        from trialflow.trial.inputs import inputs_env
        from trialflow.trial.sealing import SealedValue, SealingUnavailable
        from trialflow.trial.wire import CHECKPOINT_RECORDS_VAR

        sealed = sorted(name for name, value in (inputs or {}).items() if isinstance(value, SealedValue))
        if sealed:  # never "***" handed on as if it were the value
            raise SealingUnavailable(
                f"the run's secret input {sealed[0]!r} is kept sealed with Airflow's [core] fernet_key, and "
                "this process cannot open it (no key, or another one than the start step's)"
            )
        env = inputs_env(inputs)
        if self.config.checkpoints is not None:
            env[CHECKPOINT_RECORDS_VAR] = "1"  # the SDK sends a record per checkpoint saved
        command = (
            self._local_function_command(service_index) or effective_trial_command(self.config, service_index) or ""
        )
        return TrialSpec(
            experiment_id=self.experiment_id,
            trial_id=trial_id_for(self.experiment_id, trial_index),
            sequence=trial_index,
            parameter_id=parameter_id,
            parameters=parameters,
            command=command,
            code_dir=effective_code_directory(self.config, service_index),
            gpu_number=effective_gpu_number(self.config, service_index),
            code_excludes=config_files(self.config),
            parameter_source=parameter_source,
            env=env,
            checkpoint_dirs=self.population_based,
        )


class TrialXCom(TypedDict):
    """What a trial task returns (its XCom): the trial, how it ended and where it ran."""

    trial_index: int
    trial_id: str
    parameters: dict[str, Any]
    #: NNI's status name.
    status: str
    #: The final result's number when finite, else None.
    final_metric: float | None
    intermediate_count: int
    message: str | None
    platform: str | None
    host: str | None


def trial_result(
    trial_index: int,
    trial_id: str,
    parameters: dict[str, Any],
    status: TrialStatus,
    final_metric: float | None,
    intermediate_count: int,
    handle: TrialHandle | None = None,
    message: str | None = None,
) -> TrialXCom:
    """The small dict a trial task returns as its XCom."""
    return TrialXCom(
        trial_index=trial_index,
        trial_id=trial_id,
        parameters=parameters,
        status=status.value,
        final_metric=final_metric,
        intermediate_count=intermediate_count,
        message=message,
        platform=handle.get("platform") if handle else None,
        host=handle.get("host") if handle else None,
    )

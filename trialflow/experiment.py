"""One experiment at run time, without Airflow: ids, folders, tuner, platform, results.

The operators, the sensor, the trigger and the CLI are thin shells around this
module, so everything an experiment does can be driven and tested without a
scheduler.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
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
from trialflow.config.errors import ConfigError, Problem
from trialflow.config.model import AlgorithmConfig
from trialflow.config.registry import PlatformUnavailable, get_platform_entry
from trialflow.config.search_space import SearchSpace, parse_search_space
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
from trialflow.run_windows import RunWindow, RunWindows, windows_in

if TYPE_CHECKING:
    from optuna.pruners import BasePruner

    from trialflow.tuning.experiment_store import ExperimentStore

log = logging.getLogger(__name__)

#: Trials one DAG run holds when a config sets no maxTrialNumber (at least this many, and ten
#: waves of trialConcurrency): a DAG needs a finite fan-out, so the experiment goes on in
#: follow-on runs of the same DAG (see continuation), never stopping at a silent cap.
UNBOUNDED_TRIALS_PER_RUN = 100
UNBOUNDED_WAVES_PER_RUN = 10
#: The run conf key a follow-on run names the run it continues with.
CONTINUES_KEY = "continues"
EXPERIMENT_ID = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")
#: Study user attribute holding the limits a person changed while it ran (trialflow.steering).
LIMITS_ATTR = "limits"
WORKDIR_ENV = "TRIALFLOW_WORKDIR"


def default_home(config_path: Path) -> Path:
    """Where `trialflow run` keeps its private Airflow, store and trial folders for a config."""
    return config_path.resolve().parent / ".trialflow"


def run_workdir(config: ExperimentConfig, home: Path) -> Path:
    """The trial folders' root of a `trialflow run` in ``home``: the config's
    experimentWorkingDirectory, else ``home/experiments`` (what run and render both use)."""
    return Path(config.experiment_working_directory or home / "experiments")


def default_workdir() -> Path:
    """Like NNI's ~/nni-experiments; `trialflow run` points it into its private home."""
    return Path(os.environ.get(WORKDIR_ENV) or Path.home() / "trialflow-experiments").expanduser()


def check_runnable(config: ExperimentConfig) -> list[Problem]:
    """What would stop this (valid) config from running here: unsupported algorithm, platform
    without a runner, GPU requests. Empty when the experiment can run."""
    from trialflow.tuning.algorithms import check_algorithms

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
        count, points = trial_count(config), _points(config)
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


def _points(config: ExperimentConfig) -> int | None:
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
    points = _points(config)
    if points is None:
        if config.max_trial_number:
            return config.max_trial_number
        waves = UNBOUNDED_WAVES_PER_RUN * config.trial_concurrency
        return min(MAX_TRIALS_PER_RUN, max(UNBOUNDED_TRIALS_PER_RUN, waves))
    return min(config.max_trial_number, points) if config.max_trial_number else points


def unbounded(config: ExperimentConfig) -> bool:
    """No maxTrialNumber and a tuner that never runs out: as in NNI, trials keep coming until
    maxExperimentDuration (or until someone stops the experiment), over as many DAG runs as it takes."""
    return not config.max_trial_number and _points(config) is None


def continuation_run_id(experiment_id: str, first_index: int) -> str:
    """The follow-on run that starts an unbounded experiment's trials at ``first_index``: one name
    per step, so a retried end of the run before it can never start a second one."""
    return f"trialflow__{experiment_id}__from_{first_index:06d}"


def continued_run(conf: dict[str, Any] | None) -> str | None:
    """The run a follow-on run continues (its conf's ``continues``, set by the continue step);
    a hand-written conf with something else there is refused by name, not a traceback."""
    value = (conf or {}).get(CONTINUES_KEY)
    if value is None or isinstance(value, str) and value:
        return value
    raise ValueError(
        f"dag run conf {CONTINUES_KEY}: expected the run id (text) of the run this one continues, got {value!r}"
    )


@dataclass(frozen=True)
class Continuation:
    """Whether (and why not) a finished run of an unbounded experiment goes on in another one."""

    run_id: str | None
    conf: dict[str, Any]
    reason: str


def experiment_id_for_run(
    config: ExperimentConfig, dag_id: str, run_id: str, conf: dict[str, Any] | None = None
) -> str:
    """Which experiment a DAG run drives: one named in the run's conf (``experiment_id``, e.g.
    to resume an older one), one study for the whole DAG (scheduledRuns: continue), or its own."""
    named = (conf or {}).get("experiment_id")
    if named:
        if not isinstance(named, str) or not EXPERIMENT_ID.fullmatch(named):
            raise ValueError(f"dag run conf experiment_id: expected lowercase letters, digits and '-', got {named!r}")
        return named
    if config.scheduled_runs == "continue":
        return experiment_id_for(dag_id, "")
    return experiment_id_for(dag_id, run_id)


class ExperimentNotOwned(Exception):
    """A DAG run named (or would write to) an experiment that is not its DAG's to drive.

    Experiment ids are derived from names, so they are guessable: a person allowed to
    trigger one DAG must not reach another DAG's experiment by naming its id in the run's
    conf (nor plant trials in the id a future run of that DAG will get)."""


def check_owner(
    store: ExperimentStore,
    experiment_id: str,
    dag_id: str,
    conf: dict[str, Any] | None,
    run_id: str | None = None,
    shared: bool = False,
) -> None:
    """Refuse, before anything is written, a run that would drive an experiment of another DAG.

    An experiment belongs to the DAG whose start step created it (its ``dag_id`` attribute).
    A run may re-open its own experiment (a cleared run, ``scheduledRuns: continue``) and may
    name, in its conf, an existing experiment of its own DAG; a named experiment that does not
    exist is refused too, so no one can pre-create the id another DAG's run will use. The
    message is the same whether the named id exists under another DAG or not at all: it
    tells nobody what another DAG holds.

    With ``run_id`` (the start step), a run whose id is its own (not named, not the DAG's
    ``shared`` study) re-opens an existing experiment only if that experiment is this run's:
    another run of the same DAG landing on its id is refused instead of silently running its
    trials inside the other run's experiment."""
    named = bool((conf or {}).get("experiment_id"))
    owner = store.experiment_attr(experiment_id, "dag_id") if store.experiment_exists(experiment_id) else None
    if owner == dag_id:
        if run_id is not None and not named and not shared:
            attrs = store.experiment_attrs(experiment_id)
            if run_id not in windows_in(attrs) and attrs.get("run_id") != run_id:
                raise ExperimentNotOwned(
                    f"experiment {experiment_id!r} is another run's of DAG {dag_id!r} (run {attrs.get('run_id')!r}), "
                    f"not run {run_id!r}'s: the two run ids share an experiment id; refused (nothing was changed)"
                )
        return
    if named:
        raise ExperimentNotOwned(
            f"dag run conf experiment_id: {experiment_id!r} is not an experiment of DAG {dag_id!r}; "
            "a run may only continue an experiment its own DAG started (nothing was changed)"
        )
    if owner is not None:
        raise ExperimentNotOwned(
            f"experiment {experiment_id!r} belongs to another DAG, not {dag_id!r}: refused (nothing was changed)"
        )


@dataclass
class Experiment:
    """A config bound to one run: its id, folder, tuner and platform."""

    config: ExperimentConfig
    experiment_id: str
    workdir: Path

    @classmethod
    def for_run(
        cls,
        config_path: str | Path,
        dag_id: str,
        run_id: str,
        workdir: Path | None = None,
        conf: dict[str, Any] | None = None,
        check: bool = True,
    ) -> Experiment:
        """``check``: the full runnability check (walks, on Kubernetes packs, the code folder);
        DAG parsing and the start step do it, a trial task or trigger only loads the config."""
        config = load_runnable_config(config_path) if check else load_config(config_path)
        return cls(
            config,
            experiment_id_for_run(config, dag_id, run_id, conf),
            Path(workdir or config.experiment_working_directory or default_workdir()),
        )

    @property
    def algorithm(self) -> AlgorithmConfig:
        """The tuner, or the advisor (which chooses parameters too)."""
        algorithm = self.config.tuner or self.config.advisor
        assert algorithm is not None  # the loader requires one
        return algorithm

    @cached_property
    def pruner(self) -> BasePruner | None:
        from trialflow.tuning.assessors import make_pruner

        return make_pruner(self.config)

    def open(self, store: ExperimentStore) -> None:
        """Create the experiment in the store, or re-open it (a cleared or continued run)."""
        store.open_experiment(
            self.experiment_id, self.algorithm, self.space, self.config.optimize_mode, self.pruner, self.objectives
        )

    @property
    def objectives(self) -> list[dict[str, str]] | None:
        """Several objectives (trialflow's key) as the store keeps them; None for NNI's one."""
        chosen = self.config.objectives
        return [{"metric": o.metric, "mode": o.mode} for o in chosen] if chosen else None

    def window(self, store: ExperimentStore, run_id: str) -> RunWindow:
        """The trial indexes and deadline that DAG run ``run_id`` owns."""
        return RunWindows(store, self.experiment_id).get(run_id)

    def start_run(
        self,
        store: ExperimentStore,
        run_id: str,
        now: float | None = None,
        continues: str | None = None,
        count: int | None = None,
    ) -> RunWindow:
        """Give this DAG run its trial indexes (kept when the run is cleared and starts again) and a
        fresh maxExperimentDuration window from now; a run that ``continues`` another (an
        unbounded experiment's follow-on run) keeps that run's deadline instead. ``count``: the
        DAG's fan-out when it sets its own (unbounded experiments), else trial_count."""
        now = time.time() if now is None else now
        windows = windows_in(store.experiment_attrs(self.experiment_id))
        known = windows.get(run_id)
        first = known.first_index if known is not None else max((w.end_index for w in windows.values()), default=0)
        duration = self.config.max_experiment_duration
        deadline = now + duration if duration else None
        # When the run's maxExperimentDuration counts from: its own start, or the start of the run
        # it continues (kept, so a changed duration is added to it, never to a difference).
        counted_from = now
        earlier = windows.get(continues) if continues is not None else None
        if earlier is not None:
            deadline = earlier.deadline
            counted_from = earlier.counted_from or now
        # Never more indexes than a maxTrialNumber a person changed leaves (the config's is the
        # fan-out of each run, scheduledRuns: continue included): a follow-on run that took a
        # whole fan-out after an added trial raised the limit by one started that one trial and
        # skipped the rest, so the indexes a later raise gave were never run.
        size = count or trial_count(self.config)
        limit = self.max_trial_number(store)
        if limit is not None:
            size = max(0, min(size, int(limit) - first))
        window = RunWindow(first, size, deadline, exists=True, counted_from=counted_from)
        RunWindows(store, self.experiment_id).put(
            run_id,
            {
                "first_index": window.first_index,
                "count": window.count,
                "deadline": window.deadline,
                "started_at": now,
                "counted_from": counted_from,
            },
        )
        return window

    def end_run(self, store: ExperimentStore, run_id: str, now: float | None = None) -> None:
        """Mark run ``run_id`` over (its end step ran): the steering actions refuse an experiment
        whose runs are all over, on the pages and on the command line alike."""
        at = time.time() if now is None else now
        RunWindows(store, self.experiment_id).update(run_id, lambda old: {**old, "ended_at": at})

    def continuation(self, store: ExperimentStore, run_id: str, now: float | None = None) -> Continuation:
        """After run ``run_id`` ended: the follow-on run an unbounded experiment needs, or why none.

        Only an experiment without maxTrialNumber whose tuner never runs out goes on, and only
        while its maxExperimentDuration lasts (without one, until someone stops it: pause the
        DAG or mark the run failed, as ``nnictl stop`` would). The follow-on run's conf names
        this experiment and this run (whose deadline it keeps)."""
        window = self.window(store, run_id)
        next_index = window.first_index + window.count
        limit = self.max_trial_number(store)
        if limit is None and not unbounded(self.config):
            return Continuation(None, {}, "the experiment's trials are all in this run")
        if window.stopped:
            return Continuation(None, {}, f"the run was stopped ({window.stopped.get('reason')})")
        if limit is not None and next_index >= limit:
            return Continuation(None, {}, f"maxTrialNumber ({limit}) reached")
        points = _points(self.config)
        if points is not None and next_index >= points:
            return Continuation(None, {}, f"the tuner's {points} points are all tried")
        if window.expired(now):
            return Continuation(None, {}, "maxExperimentDuration reached")
        conf = {"experiment_id": self.experiment_id, CONTINUES_KEY: run_id}
        why = f"maxTrialNumber raised to {limit}" if limit is not None else "no maxTrialNumber"
        return Continuation(
            continuation_run_id(self.experiment_id, next_index),
            conf,
            f"{why}: trials {next_index}.. go on in the next run",
        )

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
        from trialflow.tuning.assessors import stop_reason

        def check() -> str | None:
            if not store.should_stop(self.experiment_id, storage_id, pruner):
                return None
            return stop_reason(self.config, store.trial(storage_id).last_step)

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

    def choose_service(self, store: ExperimentStore, trial_index: int) -> int:
        """NNI's hybrid mode: the listed platform with the fewest active (submitted, not ended)
        trials of this experiment; ties go round-robin by trial index."""
        count = len(self.config.training_service)
        if count == 1:
            return 0
        active = [0] * count
        for trial in store.active_trials(self.experiment_id):
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
        }

    def trial_spec(
        self,
        trial_index: int,
        parameter_id: int,
        parameters: dict[str, Any],
        service_index: int = 0,
        parameter_source: str = "algorithm",
    ) -> TrialSpec:
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
            code_excludes=config_files(self.config),
            parameter_source=parameter_source,
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

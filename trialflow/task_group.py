"""An experiment as a task group in the author's own DAG: ``prepare >> tune >> train(tune.best)``.

The tasks are those of an experiment DAG (trialflow.dag): a start step, one mapped task per trial
(at most ``trialConcurrency`` at once), the watch that reconciles trials with their tasks, the
end step, and publishing the best parameters on an Asset. ``add_experiment_tasks`` builds them
wherever it is called: at a DAG's top for experiment_dag (the ids every run has used), inside
an ExperimentTaskGroup under its group id. Each group is its own experiment, owned by (DAG,
group): its id, its conf key (``{"experiments": {group_id: ...}}``), its trialConcurrency
changes and its Asset are its own, and a run or action naming another group's is refused.

The config is a YAML file (a path, relative to the DAG file) or a mapping written in the DAG
file (trialflow.config.inline): checked by the same model, its errors name the DAG file and
the key, and the DAG fails to import.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from airflow.sdk import TaskGroup, XComArg

from trialflow import task_ids
from trialflow.assets import best_parameters_asset
from trialflow.hooks.concurrency_at_parse import changed_concurrency
from trialflow.hooks.experiment_store import DEFAULT_CONN_ID
from trialflow.limits import MAX_TRIALS_PER_RUN
from trialflow.operators.experiment import (
    ContinueExperimentOperator,
    EndExperimentOperator,
    PublishBestOperator,
    StartExperimentOperator,
    WatchTrialsOperator,
)
from trialflow.operators.trial import SubmitTrialOperator
from trialflow.plan import INLINE_MARK, Built, DagPlan, load_plan
from trialflow.platforms import hosts
from trialflow.published import NAMESPACE

DEFAULT_RETRIES = 2
#: Task defaults an experiment's tasks need: retries re-attach a trial task to its running
#: trial after an infrastructure fault (never a second copy of the trial).
EXPERIMENT_DEFAULT_ARGS: dict[str, Any] = {"retries": DEFAULT_RETRIES, "retry_delay": timedelta(seconds=5)}


#: While `trialflow validate`/`convert`/`render` import a DAG file: the experiments it builds.
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
    here = Path(__file__).resolve().parent
    frame = inspect.currentframe()
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith("<") and Path(filename).resolve().parent != here:
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


def trials_in_run(plan: DagPlan, trials_per_run: int | None) -> int:
    """The mapped fan-out: the config's trials, or ``trials_per_run`` for an experiment without
    maxTrialNumber (refused for one that has it)."""
    if trials_per_run is None:
        return plan.trial_count
    if not plan.unbounded:
        raise ValueError(
            f"{plan_origin(plan)}: trials_per_run is for experiments without maxTrialNumber; "
            f"this one runs {plan.trial_count} trials"
        )
    if isinstance(trials_per_run, bool) or not isinstance(trials_per_run, int):
        raise ValueError(f"trials_per_run: expected a whole number, got {trials_per_run!r}")
    if not 1 <= trials_per_run <= MAX_TRIALS_PER_RUN:
        raise ValueError(f"trials_per_run: expected 1..{MAX_TRIALS_PER_RUN}, got {trials_per_run}")
    return trials_per_run


def plan_origin(plan: DagPlan) -> str:
    """The config's file, or "a config written in a DAG file"."""
    return "a config written in the DAG file" if plan.config_path.startswith(INLINE_MARK) else plan.config_path


def stays_on_host(plan: DagPlan, default_args: dict[str, Any], local_queue: str | None) -> str | None:
    """Under a multi-host executor, the queue of the one host a local experiment's tasks must
    use (None: no pinning needed); refuses one without a queue (trialflow.platforms.hosts)."""
    from airflow.sdk.configuration import conf

    executor = hosts.executor_class_name(conf.get("core", "executor", fallback=""), default_args.get("executor"))
    queue = local_queue or default_args.get("queue") or conf.get(*hosts.QUEUE_SETTING, fallback=None)
    problem = hosts.placement_problem(plan.platforms, plan.host_bound, executor, queue)
    if problem is not None:
        from trialflow.config.errors import ConfigError  # here: a planned parse skips the config package

        raise ConfigError.single(Path(plan_origin(plan)), *problem)
    if not (plan.host_bound and hosts.spans_hosts(executor)):
        return None
    return str(queue)


@dataclass(frozen=True)
class ExperimentTasks:
    """The experiment's tasks, as built: what a caller wires to its own."""

    start: StartExperimentOperator
    trials: Any  # the mapped SubmitTrialOperator (an Airflow MappedOperator)
    watch: WatchTrialsOperator
    end: EndExperimentOperator
    publish: PublishBestOperator
    follow_on: ContinueExperimentOperator | None


def add_experiment_tasks(
    plan: DagPlan,
    *,
    dag_id: str,
    group: str | None,
    store_conn_id: str,
    poll_interval: float,
    defer_after: float,
    cleanup: bool,
    trials_per_run: int | None,
    queue: str | None,
    asset_name: str | None,
    inputs: Mapping[str, Any] | None = None,
) -> ExperimentTasks:
    """Build the experiment's tasks in the current DAG or task group (``group``: its full id,
    whose experiment they drive; None at a DAG's top)."""
    count = trials_in_run(plan, trials_per_run)
    source = plan.config_path
    placed: dict[str, Any] = {"queue": queue} if queue else {}
    common: dict[str, Any] = {"config_path": source, "store_conn_id": store_conn_id, "experiment_group": group}
    # trialConcurrency, unless a person changed it for the running experiment (the pages' action
    # asks Airflow to parse this file again, and this parse reads the new value).
    concurrency = changed_concurrency(store_conn_id, dag_id, group) or plan.trial_concurrency
    published_on = best_parameters_asset(dag_id, asset_name or _group_asset(dag_id, group))
    # maxExperimentDuration is not a dagrun_timeout: a timed-out run would never reach its end
    # step. The start step sets a deadline; past it no trial starts and running ones are cancelled.
    start = StartExperimentOperator(
        task_id=task_ids.START,
        trial_count=count if trials_per_run is not None else None,
        inputs=dict(inputs) if inputs else None,
        **common,
        **placed,
    )
    trials = SubmitTrialOperator.partial(
        task_id=task_ids.TRIAL,
        poll_interval=poll_interval,
        defer_after=defer_after,
        stay_on_host=queue is not None,
        max_active_tis_per_dagrun=concurrency,
        map_index_template="{{ trial_label }}",
        **common,
        **placed,
    ).expand(trial_index=list(range(count)))
    trial_task = task_ids.task_id(task_ids.TRIAL, group)
    end = EndExperimentOperator(
        task_id=task_ids.END, trigger_rule="all_done", cleanup=cleanup, trial_task_id=trial_task, **common, **placed
    )
    # Trials whose task ended while nothing followed them are stopped and closed meanwhile
    # (trialflow.runs.reconcile); the end step waits for the watch and makes a last pass itself.
    watch = WatchTrialsOperator(task_id=task_ids.WATCH, trial_task_id=trial_task, **common, **placed)
    start >> trials >> end
    start >> watch >> end
    follow_on = None
    if group is None:
        # An unbounded experiment goes on in follow-on runs; so does one whose maxTrialNumber a
        # person raised past this run's trials (skipped when the experiment is over). Not in a
        # task group: a follow-on run would run the author's other tasks again.
        follow_on = ContinueExperimentOperator(task_id=task_ids.CONTINUE, trigger_dag_id=dag_id, **placed)
        end >> follow_on
    publish = PublishBestOperator(
        task_id=task_ids.PUBLISH,
        asset=published_on,
        end_task_id=task_ids.task_id(task_ids.END, group),
        start_task_id=task_ids.task_id(task_ids.START, group),
        **placed,
    )
    end >> publish
    return ExperimentTasks(start, trials, watch, end, publish, follow_on)


def _group_asset(dag_id: str, group: str | None) -> str | None:
    """A group's own Asset (``trialflow/<dag>/<group>/best``); None: the DAG's default."""
    return None if group is None else f"{NAMESPACE}{dag_id}/{group}/best"


class ExperimentTaskGroup(TaskGroup):
    """An NNI experiment as a task group: place it in any DAG, between your own tasks.

    ``config``: an NNI experiment config (v2 or v1 YAML; a path relative to the DAG file) or
    the same keys as a mapping written in the DAG file (``searchSpace``, ``tuner``,
    ``trialFunction``...; no secrets: name Airflow connections). It is checked when the DAG
    file is parsed: an error fails the DAG import naming the file and the key.

    ``tune.best`` is an XComArg of the best parameters (with several objectives, the Pareto
    set) for a downstream task: ``train_final(tune.best)``; ``tune.summary`` is the end step's
    summary. The experiment is published on the Asset ``trialflow/<dag_id>/<group_id>/best``
    (``asset_name=`` another); a run's conf names an earlier experiment of this group with
    ``{"experiments": {"<group_id>": "<experiment id>"}}``.

    ``inputs``: values every trial of a run gets from the tasks upstream, e.g.
    ``{"data": prepare()}`` (an XComArg, or a Jinja template), rendered once by the start step
    (its Rendered Template shows them): ``TRIALFLOW_INPUT_DATA`` in a trial's environment, and a
    function trial's keyword argument ``data`` when its signature names it.

    The other keyword arguments are experiment_dag's (``store_conn_id``, ``poll_interval``,
    ``defer_after``, ``cleanup``, ``trials_per_run``, ``local_queue``) and TaskGroup's
    (``tooltip``, ``default_args``...; the trial tasks retry twice unless default_args says).
    An experiment in a group runs within its DAG run: it has no follow-on runs, so one without
    maxTrialNumber needs ``trials_per_run``.
    """

    def __init__(
        self,
        group_id: str,
        config: str | Path | Mapping[str, Any],
        *,
        store_conn_id: str = DEFAULT_CONN_ID,
        poll_interval: float = 1.0,
        defer_after: float = 10.0,
        cleanup: bool = False,
        trials_per_run: int | None = None,
        local_queue: str | None = None,
        asset_name: str | None = None,
        inputs: Mapping[str, Any] | None = None,
        **group_kwargs: Any,
    ) -> None:
        if group_kwargs.pop("prefix_group_id", True) is not True:
            raise ValueError("prefix_group_id: an experiment's tasks keep their group's prefix (each group is its own)")
        source = config_source(config)
        plan = load_plan(source)  # the full check, unless this config passed it before (trialflow.plan)
        if plan.unbounded and trials_per_run is None:
            raise ValueError(
                f"{plan_origin(plan)}: an experiment in a task group runs within its DAG run: set maxTrialNumber "
                "in the config, or trials_per_run here (with scheduledRuns: continue to go on in later runs)"
            )
        defaults = {**EXPERIMENT_DEFAULT_ARGS, **group_kwargs.pop("default_args", {})}
        group_kwargs.setdefault("tooltip", f"NNI experiment {plan.experiment_name or group_id}")
        super().__init__(group_id=group_id, default_args=defaults, **group_kwargs)  # type: ignore[arg-type]
        assert self.group_id is not None  # a named group
        built(self.dag.dag_id, self.group_id, source, inputs)
        dag_defaults = {**(self.dag.default_args or {}), **defaults}
        queue = stays_on_host(plan, dag_defaults, local_queue)
        with self:
            self.tasks = add_experiment_tasks(
                plan,
                dag_id=self.dag.dag_id,
                group=self.group_id,
                store_conn_id=store_conn_id,
                poll_interval=poll_interval,
                defer_after=defer_after,
                cleanup=cleanup,
                trials_per_run=trials_per_run,
                queue=queue,
                asset_name=asset_name,
                inputs=inputs,
            )

    @property
    def best(self) -> XComArg:
        """The best parameters (a mapping; with several objectives, the Pareto set as a list of
        ``{trial_id, trial_index, parameters, values}``), for a task downstream."""
        from trialflow.run_summary import BEST_PARAMETERS_KEY

        return XComArg(self.tasks.end, key=BEST_PARAMETERS_KEY)

    @property
    def best_value(self) -> XComArg:
        """The best trial's final metric (a number; with several objectives, the Pareto set's
        values as a list of ``{metric: value}`` in ``best``'s order; None when no trial
        succeeded), for a task downstream that compares experiments."""
        from trialflow.run_summary import BEST_VALUE_KEY

        return XComArg(self.tasks.end, key=BEST_VALUE_KEY)

    @property
    def summary(self) -> XComArg:
        """The end step's summary (trialflow.run_summary.ExperimentSummary)."""
        return XComArg(self.tasks.end)

    @property
    def asset(self) -> Any:
        """The Asset the experiment's best parameters are published on."""
        return self.tasks.publish.asset

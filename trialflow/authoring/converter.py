"""One NNI experiment turned into Airflow tasks: the converter behind experiment_dag and
ExperimentTaskGroup, as cosmos keeps one converter behind its DbtDag and DbtTaskGroup.

* :class:`ExperimentOptions`: how the tasks are built (the keyword arguments both take, each
  declared, defaulted and checked once);
* :func:`load`: the config as the DAG file gives it (a path or a mapping) -> its source and its
  checked plan;
* :func:`add_experiment_tasks`: the tasks, built in the current DAG or task group: a start
  step, one mapped task per trial, the watch that reconciles trials with their tasks, the end
  step, publishing the best parameters on an Asset, and at a DAG's top the follow-on step.
  ``trialConcurrency`` becomes the mapped trial task's ``max_active_tis_per_dagrun``: deferred
  task instances count toward it (verified on Airflow 3.3), so it holds while trials wait in
  the triggerer.

experiment_dag and ExperimentTaskGroup only make their DAG or group and call these.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from trialflow import task_ids
from trialflow.assets import best_parameters_asset
from trialflow.authoring.dag_sources import config_source
from trialflow.authoring.plan import DagPlan, load_plan
from trialflow.config.inline import MARK as INLINE_MARK
from trialflow.from_airflow.concurrency_at_parse import changed_concurrency
from trialflow.hooks.experiment_store import DEFAULT_CONN_ID
from trialflow.lifecycle import start_place
from trialflow.lifecycle.start_place import StartPlace
from trialflow.limits import MAX_TRIALS_PER_RUN
from trialflow.operators.experiment import (
    ContinueExperimentOperator,
    EndExperimentOperator,
    PublishBestOperator,
    StartExperimentOperator,
    TrackExperimentOperator,
    WatchTrialsOperator,
)
from trialflow.operators.trial import SubmitTrialOperator, TriggeredTrialOperator
from trialflow.outputs.published import NAMESPACE
from trialflow.platforms import hosts

DEFAULT_RETRIES = 2
#: Task defaults an experiment's tasks need: retries re-attach a trial task to its running
#: trial after an infrastructure fault (never a second copy of the trial).
EXPERIMENT_DEFAULT_ARGS: dict[str, Any] = {"retries": DEFAULT_RETRIES, "retry_delay": timedelta(seconds=5)}


@dataclass(frozen=True)
class ExperimentOptions:
    """How an experiment's tasks are built: the keyword arguments experiment_dag and
    ExperimentTaskGroup take beside their DAG's or group's own.

    ``store_conn_id``: the ``trialflow`` connection of the experiment store.
    ``poll_interval``: seconds between two looks at a trial while it runs.
    ``defer_after``: seconds a trial task waits in its worker before deferring to the
    triggerer; shorter trials finish without the deferral's second task start.
    ``cleanup``: the end step removes what the experiment left on its platforms (files on remote
    machines; jobs, ConfigMaps and files on storage on Kubernetes).
    ``trials_per_run``: for an experiment without maxTrialNumber, how many mapped trial tasks
    each run holds (refused for one that has it).
    ``local_queue``: under an executor that may run tasks on several hosts (Celery, Kubernetes,
    Edge), the queue one host serves, for an experiment with the local platform (default:
    ``[trialflow] local_queue``); docs/multi-host.md says why it is required.
    ``asset_name``: the Asset the best parameters are published on when the experiment is over
    (default ``trialflow/<dag_id>/best``, a group's ``trialflow/<dag_id>/<group_id>/best``).
    ``inputs``: values every trial of a run gets (XComArgs of upstream tasks, or Jinja
    templates), rendered once by the start step (trialflow.trial.inputs).
    ``start_trials_in``: ``"worker"`` (a worker process starts each trial task, Airflow holds
    trialConcurrency), ``"triggerer"`` (the task starts in the triggerer with no worker
    process: the store holds trialConcurrency; trialflow.triggers.trial_start; not with
    ``local_queue``: local trials on a host of their own are started by that host's worker) or
    ``"auto"`` (the default: the triggerer unless the experiment needs a worker,
    trialflow.lifecycle.start_place says when).
    """

    store_conn_id: str = DEFAULT_CONN_ID
    poll_interval: float = 1.0
    defer_after: float = 10.0
    cleanup: bool = False
    trials_per_run: int | None = None
    local_queue: str | None = None
    asset_name: str | None = None
    inputs: Mapping[str, Any] | None = None
    start_trials_in: str = start_place.AUTO

    def __post_init__(self) -> None:
        if self.start_trials_in not in start_place.START_PLACES:
            expected = ", ".join(start_place.START_PLACES)
            raise ValueError(f"start_trials_in: expected one of {expected}, got {self.start_trials_in!r}")

    @classmethod
    def take(cls, kwargs: MutableMapping[str, Any], base: ExperimentOptions | None = None) -> ExperimentOptions:
        """The options among ``kwargs`` (over ``base``'s, when given), removed from it: what is
        left is the DAG's or the group's own."""
        if base is not None and not isinstance(base, cls):
            raise TypeError(f"options: expected trialflow's ExperimentOptions, got {type(base).__name__}")
        names = [f.name for f in dataclasses.fields(cls)]
        return dataclasses.replace(base or cls(), **{name: kwargs.pop(name) for name in names if name in kwargs})


def load(config: str | Path | Mapping[str, Any]) -> tuple[str, DagPlan]:
    """The config's source as the tasks are handed it (trialflow.authoring.dag_sources.config_source) and
    its plan: the full check, unless this config passed it before (trialflow.authoring.plan)."""
    source = config_source(config)
    return source, load_plan(source)


def load_for_group(
    config: str | Path | Mapping[str, Any], group_kwargs: MutableMapping[str, Any], base: ExperimentOptions | None
) -> tuple[str, DagPlan, ExperimentOptions]:
    """:func:`load` for an ExperimentTaskGroup, with its options taken out of ``group_kwargs``.
    Refused: ``prefix_group_id=False`` (each group's tasks keep its prefix: each is its own
    experiment), and an experiment without maxTrialNumber and without ``trials_per_run`` (a
    group runs within its DAG run, with no follow-on runs)."""
    if group_kwargs.pop("prefix_group_id", True) is not True:
        raise ValueError("prefix_group_id: an experiment's tasks keep their group's prefix (each group is its own)")
    options = ExperimentOptions.take(group_kwargs, base)
    source, plan = load(config)
    if plan.unbounded and options.trials_per_run is None:
        raise ValueError(
            f"{plan_origin(plan)}: an experiment in a task group runs within its DAG run: set maxTrialNumber "
            "in the config, or trials_per_run here (with scheduledRuns: continue to go on in later runs)"
        )
    return source, plan, options


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
    """The config's file, or "a config written in the DAG file"."""
    return "a config written in the DAG file" if plan.config_path.startswith(INLINE_MARK) else plan.config_path


def stays_on_host(plan: DagPlan, default_args: Mapping[str, Any], local_queue: str | None) -> str | None:
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


def trial_start_place(plan: DagPlan, options: ExperimentOptions, count: int, queue: str | None) -> StartPlace:
    """Where this experiment's trial tasks start (trialflow.lifecycle.start_place), with the
    triggerer's capacity as this deployment sets it."""
    from airflow.sdk.configuration import conf

    return start_place.choose(
        options.start_trials_in,
        trial_tasks=count,
        queue=queue,
        ask_fits_model=plan.ask_fits_model,
        algorithm=plan.algorithm,
        triggerer_capacity=conf.getint("triggerer", "capacity", fallback=1000),
    )


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
    plan: DagPlan, options: ExperimentOptions, *, dag_id: str, group: str | None, queue: str | None
) -> ExperimentTasks:
    """Build the experiment's tasks in the current DAG or task group (``group``: its full id,
    whose experiment they drive; None at a DAG's top; ``queue``: stays_on_host's answer)."""
    count = trials_in_run(plan, options.trials_per_run)
    placed: dict[str, Any] = {"queue": queue} if queue else {}
    common: dict[str, Any] = {
        "config_path": plan.config_path,
        "store_conn_id": options.store_conn_id,
        "experiment_group": group,
    }
    # trialConcurrency, unless a person changed it for the running experiment (the pages' action
    # asks Airflow to parse this file again, and this parse reads the new value).
    concurrency = changed_concurrency(options.store_conn_id, dag_id, group) or plan.trial_concurrency
    published_on = best_parameters_asset(dag_id, options.asset_name or _group_asset(dag_id, group))
    # maxExperimentDuration is not a dagrun_timeout: a timed-out run would never reach its end
    # step. The start step sets a deadline; past it no trial starts and running ones are cancelled.
    start = StartExperimentOperator(
        task_id=task_ids.START,
        trial_count=count if options.trials_per_run is not None else None,
        inputs=dict(options.inputs) if options.inputs else None,
        **common,
        **placed,
    )
    trial_operator: type[SubmitTrialOperator] = SubmitTrialOperator
    if trial_start_place(plan, options, count, queue).place == "triggerer":
        if queue is not None:
            raise ValueError(
                f"{plan_origin(plan)}: start_trials_in='triggerer' starts trials where the triggerer runs; local "
                f"trials on hosts of their own (queue {queue!r}) start in that host's worker: leave it 'worker'"
            )
        trial_operator = TriggeredTrialOperator
    trials = trial_operator.partial(
        task_id=task_ids.TRIAL,
        poll_interval=options.poll_interval,
        defer_after=options.defer_after,
        stay_on_host=queue is not None,
        max_active_tis_per_dagrun=concurrency,
        map_index_template="{{ trial_label }}",
        **common,
        **placed,
    ).expand(trial_index=list(range(count)))
    trial_task = task_ids.task_id(task_ids.TRIAL, group)
    end = EndExperimentOperator(
        task_id=task_ids.END,
        trigger_rule="all_done",
        cleanup=options.cleanup,
        trial_task_id=trial_task,
        **common,
        **placed,
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
        store_conn_id=options.store_conn_id,
        **placed,
    )
    end >> publish
    if plan.tracked:
        # MLflow may be away when the run ends: this step sends what it missed, waiting for it
        # in the triggerer (no worker slot), while the asset is published without waiting.
        track = TrackExperimentOperator(
            task_id=task_ids.TRACK,
            trigger_rule="all_done",
            end_task_id=task_ids.task_id(task_ids.END, group),
            **common,
            **placed,
        )
        end >> track
    return ExperimentTasks(start, trials, watch, end, publish, follow_on)


def describe(plan: DagPlan, count: int, place: StartPlace | None = None) -> str:
    """The experiment DAG's doc_md: the config, platforms, algorithm and fan-out, and where its
    trial tasks start and why."""
    return (
        f"**NNI experiment** `{plan_origin(plan)}`\n\n"
        f"- platform: {', '.join(plan.platforms)}\n"
        f"- {plan.algorithm_kind}: {plan.algorithm or '-'} ({plan.optimize_mode})"
        f"{f', assessor: {plan.assessor}' if plan.assessor else ''}\n"
        f"- trials: {count}"
        f"{' per run, more in follow-on runs until maxExperimentDuration' if plan.unbounded else ''}"
        f", {plan.trial_concurrency} at a time\n"
        + (f"- trial tasks start in the {place.place}: {place.why}\n" if place is not None else "")
    )


def _group_asset(dag_id: str, group: str | None) -> str | None:
    """A group's own Asset (``trialflow/<dag>/<group>/best``); None: the DAG's default."""
    return None if group is None else f"{NAMESPACE}{dag_id}/{group}/best"

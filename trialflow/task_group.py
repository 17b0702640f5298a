"""An experiment as a task group in the author's own DAG: ``prepare >> tune >> train(tune.best)``.

The tasks are those of an experiment DAG, built by the one converter (trialflow.converter)
under the group's id. Each group is its own experiment, owned by (DAG, group): its id, its conf
key (``{"experiments": {group_id: ...}}``), its trialConcurrency changes and its Asset are its
own, and a run or action naming another group's is refused.

The config is a YAML file (a path, relative to the DAG file) or a mapping written in the DAG
file (trialflow.config.inline): checked by the same model, its errors name the DAG file and
the key, and the DAG fails to import.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from airflow.sdk import TaskGroup, XComArg

from trialflow.converter import (
    EXPERIMENT_DEFAULT_ARGS,
    ExperimentOptions,
    add_experiment_tasks,
    load,
    plan_origin,
    stays_on_host,
)
from trialflow.dag_sources import built


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

    ``inputs`` and the other keyword arguments are trialflow.converter.ExperimentOptions'
    (``store_conn_id``, ``poll_interval``, ``defer_after``, ``cleanup``, ``trials_per_run``,
    ``local_queue``, ``asset_name``; or ``options=ExperimentOptions(...)``, which they
    override) and TaskGroup's (``tooltip``,
    ``default_args``...; the trial tasks retry twice unless default_args says). An experiment in
    a group runs within its DAG run: it has no follow-on runs, so one without maxTrialNumber
    needs ``trials_per_run``.
    """

    def __init__(
        self,
        group_id: str,
        config: str | Path | Mapping[str, Any],
        *,
        options: ExperimentOptions | None = None,
        **group_kwargs: Any,
    ) -> None:
        if group_kwargs.pop("prefix_group_id", True) is not True:
            raise ValueError("prefix_group_id: an experiment's tasks keep their group's prefix (each group is its own)")
        options = ExperimentOptions.take(group_kwargs, options)
        source, plan = load(config)
        if plan.unbounded and options.trials_per_run is None:
            raise ValueError(
                f"{plan_origin(plan)}: an experiment in a task group runs within its DAG run: set maxTrialNumber "
                "in the config, or trials_per_run here (with scheduledRuns: continue to go on in later runs)"
            )
        defaults = {**EXPERIMENT_DEFAULT_ARGS, **group_kwargs.pop("default_args", {})}
        group_kwargs.setdefault("tooltip", f"NNI experiment {plan.experiment_name or group_id}")
        super().__init__(group_id=group_id, default_args=defaults, **group_kwargs)  # type: ignore[arg-type]
        assert self.group_id is not None  # a named group
        built(self.dag.dag_id, self.group_id, source, options.inputs)
        queue = stays_on_host(plan, {**(self.dag.default_args or {}), **defaults}, options.local_queue)
        with self:
            self.tasks = add_experiment_tasks(plan, options, dag_id=self.dag.dag_id, group=self.group_id, queue=queue)

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

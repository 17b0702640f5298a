"""An experiment as a task group in the author's own DAG: ``prepare >> tune >> train(tune.best)``.

The one converter's tasks (trialflow.authoring.converter) under the group's id. Each group is its own
experiment, owned by (DAG, group): a run or action naming another group's is refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from airflow.sdk import TaskGroup, XComArg

from trialflow.authoring.converter import (
    EXPERIMENT_DEFAULT_ARGS,
    ExperimentOptions,
    add_experiment_tasks,
    load_for_group,
    stays_on_host,
)
from trialflow.authoring.dag_sources import built


class ExperimentTaskGroup(TaskGroup):
    """An NNI experiment as a task group: place it in any DAG, between your own tasks.

    ``config``: an NNI config (v2 or v1 YAML; a path relative to the DAG file) or the same keys
    as a mapping written in the DAG file (no secrets: name Airflow connections), checked when
    the file is parsed. ``tune.best`` is an XComArg of the best parameters (with several
    objectives, the Pareto set) for a downstream task, ``tune.summary`` the end step's summary;
    the experiment is published on the Asset ``trialflow/<dag_id>/<group_id>/best``, and a run's
    conf names an earlier experiment of this group with ``{"experiments": {"<group_id>": id}}``.
    The build options (``inputs={"data": prepare()}``: ``TRIALFLOW_INPUT_DATA`` in every trial)
    are trialflow.authoring.converter.ExperimentOptions', the rest TaskGroup's. No follow-on runs in a
    group: an experiment without maxTrialNumber needs ``trials_per_run``.
    """

    def __init__(
        self,
        group_id: str,
        config: str | Path | Mapping[str, Any],
        *,
        options: ExperimentOptions | None = None,
        **group_kwargs: Any,
    ) -> None:
        source, plan, options = load_for_group(config, group_kwargs, options)
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
        """The best parameters (with several objectives, the Pareto set), for a task downstream."""
        from trialflow.runs.summary import BEST_PARAMETERS_KEY

        return XComArg(self.tasks.end, key=BEST_PARAMETERS_KEY)

    @property
    def best_value(self) -> XComArg:
        """The best trial's final metric (several objectives: the Pareto set's values; None)."""
        from trialflow.runs.summary import BEST_VALUE_KEY

        return XComArg(self.tasks.end, key=BEST_VALUE_KEY)

    @property
    def published(self) -> XComArg:
        """The experiment's published outcome (the best trial, its parameters and its artifacts,
        as its Asset event carries them), for a task of the same DAG: read it with
        ``trialflow.assets.published`` and open an artifact with ``best_artifact``. The task is
        skipped when nothing was published (no trial succeeded), as the publish step is."""
        return XComArg(self.tasks.publish)

    @property
    def summary(self) -> XComArg:
        """The end step's summary (trialflow.runs.summary.ExperimentSummary)."""
        return XComArg(self.tasks.end)

    @property
    def asset(self) -> Any:
        """The Asset the experiment's best parameters are published on."""
        return self.tasks.publish.asset

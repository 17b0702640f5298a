"""Which DAG runs may drive an experiment: a run reaches its own DAG's experiments only. No Airflow."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trialflow.experiment import GROUP_ATTR, named_experiment
from trialflow.experiment.run_windows import windows_in

if TYPE_CHECKING:
    from trialflow.store.experiment_store import ExperimentStore


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
    group: str | None = None,
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
    trials inside the other run's experiment.

    ``group``: the task group the experiment belongs to, in a DAG that holds several; another
    group's experiment of the same DAG is refused like another DAG's."""
    named = named_experiment(conf, group)
    exists = store.experiment_exists(experiment_id)
    owner = store.experiment_attr(experiment_id, "dag_id") if exists else None
    owner_group = store.experiment_attr(experiment_id, GROUP_ATTR) if exists else None
    whose = f"DAG {dag_id!r}" if group is None else f"task group {group!r} of DAG {dag_id!r}"
    if owner == dag_id and owner_group == group:
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
            f"dag run conf {named[0]}: {experiment_id!r} is not an experiment of {whose}; "
            "a run may only continue an experiment its own DAG (and task group) started (nothing was changed)"
        )
    if owner is not None:
        raise ExperimentNotOwned(
            f"experiment {experiment_id!r} belongs to another DAG or task group, not {whose}: refused "
            "(nothing was changed)"
        )

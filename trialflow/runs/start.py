"""A DAG run starts: who may drive the experiment, which trial indexes and deadline it gets. No Airflow."""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trialflow.experiment import GROUP_ATTR, Experiment, trial_count
from trialflow.experiment.run_windows import RunWindow, RunWindows, windows_in
from trialflow.platforms.base import Connections
from trialflow.runs.continuation import continued_run
from trialflow.runs.ownership import check_owner
from trialflow.seeding.retune import Retune, seed_from_previous
from trialflow.seeding.warm_start import WarmStart, check_source, warm_start
from trialflow.trial import sealing
from trialflow.trial.inputs import check_inputs

if TYPE_CHECKING:
    from trialflow.store.experiment_store import ExperimentStore


@dataclass(frozen=True)
class RunStart:
    """What the start step did: the run's trial window, and whether the experiment existed."""

    window: RunWindow
    resumed: bool
    #: ``scheduledRuns: retune``: what the experiment took over from the DAG's previous one.
    retune: Retune | None = None
    #: The config's ``warmStart``: what the experiment took over from the one it names.
    warm_start: WarmStart | None = None


def start_run(
    experiment: Experiment,
    store: ExperimentStore,
    dag_id: str,
    run_id: str,
    conf: dict[str, Any] | None,
    *,
    count: int | None = None,
    connections: Connections | None = None,
    inputs: Mapping[str, Any] | None = None,
    secret_inputs: Collection[str] = (),
) -> RunStart:
    """Check the run may drive the experiment (ExperimentNotOwned if not: nothing is written),
    create or re-open it, give the run its trial indexes and deadline, and prepare each
    platform (stage code once). ``inputs``: the run's values for its trials, as the start step
    rendered them (trialflow.trial.inputs; InputsError names one that cannot go to a trial);
    ``secret_inputs``: the names of those Airflow's secrets masker knows as secrets (kept with
    the run's window so that every reader sees them masked). The config's warmStart is
    checked first too (WarmStartError) and given once the experiment is open
    (trialflow.seeding.warm_start)."""
    checked = check_inputs(inputs)  # before anything is written
    if any(n in checked for n in secret_inputs):
        sealing.seal("")  # SealingUnavailable before anything is written: a secret is kept only sealed
    shared = experiment.config.scheduled_runs == "continue"
    check_owner(store, experiment.experiment_id, dag_id, conf, run_id, shared, experiment.group)
    check_source(store, experiment, dag_id)  # WarmStartError: also before anything is written
    resumed = store.experiment_exists(experiment.experiment_id)
    experiment.open(store)
    owner: dict[str, Any] = {"dag_id": dag_id, "run_id": run_id}
    if experiment.group is not None:
        owner[GROUP_ATTR] = experiment.group
    store.set_experiment_attrs(experiment.experiment_id, {**experiment.description(), **owner})
    window = allot_window(
        experiment,
        store,
        run_id,
        continues=continued_run(conf),
        count=count,
        inputs=checked,
        secret_inputs=[n for n in secret_inputs if n in checked],
    )
    retune = seed_from_previous(store, experiment, dag_id) if experiment.config.scheduled_runs == "retune" else None
    started_from = warm_start(store, experiment, dag_id)
    for i in range(len(experiment.config.training_service)):
        experiment.platform(i, connections).prepare_sync(experiment.experiment_id)
    return RunStart(window, resumed, retune, started_from)


def unused_inputs(experiment: Experiment, names: Collection[str]) -> list[str]:
    """Why some of the run's inputs will not reach a function trial, said for the start step's
    log: the function (imported from the trial code folder in a Python of its own, as
    ``trialflow validate`` does) takes no argument of that name, or it could not be checked
    here (its module imports what only the trials' machines have). Empty for a command trial
    or a run without inputs. Never fails the run: a trial's own import failure fails it."""
    function = experiment.config.trial_function
    if not function or not names:
        return []
    from trialflow.config.loader import effective_code_directory
    from trialflow.trial.function import check_function

    folder = effective_code_directory(experiment.config)
    return check_function(function, str(folder), sorted(names)) if folder.is_dir() else []


def allot_window(
    experiment: Experiment,
    store: ExperimentStore,
    run_id: str,
    now: float | None = None,
    continues: str | None = None,
    count: int | None = None,
    inputs: Mapping[str, Any] | None = None,
    secret_inputs: Collection[str] = (),
) -> RunWindow:
    """Give this DAG run its trial indexes (kept when the run is cleared and starts again) and a
    fresh maxExperimentDuration window from now; a run that ``continues`` another (an
    unbounded experiment's follow-on run) keeps that run's deadline instead. ``count``: the
    DAG's fan-out when it sets its own (unbounded experiments), else trial_count."""
    now = time.time() if now is None else now
    windows = windows_in(store.experiment_attrs(experiment.experiment_id))
    known = windows.get(run_id)
    first = known.first_index if known is not None else max((w.end_index for w in windows.values()), default=0)
    duration = experiment.config.max_experiment_duration
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
    size = count or trial_count(experiment.config)
    limit = experiment.max_trial_number(store)
    if limit is not None:
        size = max(0, min(size, int(limit) - first))
    window = RunWindow(
        first,
        size,
        deadline,
        exists=True,
        counted_from=counted_from,
        inputs=dict(inputs) if inputs else None,
        secret_inputs=tuple(sorted(secret_inputs)),
    )
    RunWindows(store, experiment.experiment_id).put(run_id, window, started_at=now)
    return window

"""Assessors and advisors -> Optuna pruners, and the early-stop decision for one trial.

The decision runs where intermediate results arrive: in the trial's follow
loop (the triggerer for anything longer than a few seconds), so no worker is
woken per metric. A stopped trial is cancelled on its platform and closed as
EARLY_STOPPED (Optuna PRUNED); samplers then learn from its last intermediate
result, which is what NNI hands its tuner for an early-stopped trial.
"""

from __future__ import annotations

import copy
from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import optuna

from trialflow.config.model import AlgorithmConfig, ExperimentConfig
from trialflow.tuning import optuna_classes
from trialflow.tuning.algorithms import algorithm_spec
from trialflow.tuning.custom.runner import CustomClass

if TYPE_CHECKING:
    from optuna import Study
    from optuna.pruners import BasePruner
    from optuna.trial import FrozenTrial


def make_pruner(config: ExperimentConfig) -> BasePruner | None:
    """The experiment's early-stopping rule: its assessor, or its advisor's; None for neither."""
    if config.assessor is not None:
        return _assessor(config.assessor)
    if config.advisor is not None:
        return _advisor(config.advisor)
    return None


class CustomAssessorPruner(optuna.pruners.BasePruner):
    """A custom assessor class (trialflow.tuning.custom): trialflow.tuning.asker.judge asks the
    class itself, in its own process; Optuna never prunes with it."""

    def __init__(self, custom: CustomClass):
        self.custom = custom

    def prune(self, study: Study, trial: FrozenTrial) -> bool:
        return False


def _assessor(assessor: AlgorithmConfig) -> BasePruner:
    if assessor.class_name is not None:
        return CustomAssessorPruner(CustomClass.of(assessor, "assessor"))
    name = algorithm_spec(assessor, "assessor").name
    args = assessor.class_args
    if optuna_classes.is_class_path(name):  # an Optuna pruner by its class path
        return optuna_classes.build(name, "assessor", dict(args))  # type: ignore[no-any-return]
    if name == "Medianstop":
        # NNI judges once a trial has start_step results; Optuna counts steps from 0.
        start_step = int(args.get("start_step", 0))
        return optuna.pruners.MedianPruner(n_startup_trials=0, n_warmup_steps=max(0, start_step - 1))
    from trialflow.tuning.curvefitting import CurveFittingPruner

    return CurveFittingPruner(
        epoch_num=int(args.get("epoch_num", 20)),
        start_step=int(args.get("start_step", 6)),
        threshold=float(args.get("threshold", 0.95)),
        gap=int(args.get("gap", 1)),
    )


def _advisor(advisor: AlgorithmConfig) -> BasePruner:
    if advisor.class_name is not None:  # the user's advisor, kept as the tuner: its KillTrialJob stops a trial
        return CustomAssessorPruner(CustomClass.of(advisor, "tuner"))
    name = algorithm_spec(advisor, "advisor").name
    args = advisor.class_args
    if name == "Hyperband":
        return optuna.pruners.HyperbandPruner(
            min_resource=1, max_resource=int(args.get("R", 60)), reduction_factor=int(args.get("eta", 3))
        )
    return optuna.pruners.HyperbandPruner(
        min_resource=int(args.get("min_budget", 1)),
        max_resource=int(args.get("max_budget", 3)),
        reduction_factor=int(args.get("eta", 3)),
    )


def stop_reason(config: ExperimentConfig, step: int | None) -> str:
    algorithm = config.assessor or config.advisor
    name = (algorithm.name or algorithm.class_name) if algorithm else "assessor"
    return f"stopped early by {name} at step {step}"


#: A backlog of results is judged step by step, up to this many steps per look: the earliest
#: ones, and always the newest (see ``judge``).
JUDGED_STEPS = 32


@dataclass(frozen=True)
class Judgment:
    """What the assessor said of the results a trial reported since the last look."""

    #: The step at which it stops the trial; None: the trial runs on.
    stop_at: int | None
    #: The newest step judged (the next look judges the steps after it).
    judged_through: int | None


def judge(
    pruner: BasePruner,
    study: Study,
    trial: FrozenTrial,
    after: int | None,
    system_attrs: Callable[[], dict[str, Any]] | None = None,
) -> Judgment:
    """The assessor's verdict on the steps of ``trial`` after step ``after`` (all of them for
    None), each judged as if it had just arrived, as NNI asked its assessor at every result.

    Optuna's pruners judge a trial at its last step only. Results arrive in batches: a trigger
    that starts seconds after its trial was handed over finds dozens (a fresh triggerer's
    trigger started 10 s after the hand-over, its trial reporting every 0.2 s: ~40), and a
    trial may report faster than it is polled. Judged at the newest alone,
    Medianstop compared the trial at a step no finished trial had reached (no median: go on)
    and never stopped it; Curvefitting, which judges at certain result counts, skipped those
    counts. Past ``JUDGED_STEPS`` new steps the earliest are judged and the newest. A look
    with ``after`` None (a follower that just started, after a triggerer restart) judges the
    earliest steps again, against the trials finished by now.

    ``system_attrs`` reads the trial's system attributes again: a pruner may write some while
    it judges (Hyperband's rungs: the value with which the trial completed each), and the next
    step must be judged with them, as it would have been had it arrived alone."""
    values = trial.intermediate_values
    steps = sorted(values)
    fresh = steps[bisect_left(steps, after + 1) :] if after is not None else steps
    if not fresh:
        return Judgment(None, after)
    judged = fresh if len(fresh) <= JUDGED_STEPS else [*fresh[: JUDGED_STEPS - 1], fresh[-1]]
    position = bisect_left(steps, judged[0])
    seen = {s: values[s] for s in steps[:position]}
    view = copy.copy(trial)
    view.intermediate_values = seen
    for step in judged:
        while position < len(steps) and steps[position] <= step:
            seen[steps[position]] = values[steps[position]]
            position += 1
        if pruner.prune(study, view):
            return Judgment(step, step)
        if system_attrs is not None and step != judged[-1]:
            view.system_attrs = system_attrs()
    return Judgment(None, fresh[-1])

"""Assessors and advisors -> Optuna pruners, and the early-stop decision for one trial.

The decision runs where intermediate results arrive: in the trial's follow
loop (the triggerer for anything longer than a few seconds), so no worker is
woken per metric. A stopped trial is cancelled on its platform and closed as
EARLY_STOPPED (Optuna PRUNED); samplers then learn from its last intermediate
result, which is what NNI hands its tuner for an early-stopped trial.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import optuna

from trialflow.config.model import AlgorithmConfig, ExperimentConfig
from trialflow.tuning.algorithms import algorithm_spec

if TYPE_CHECKING:
    from optuna.pruners import BasePruner


def make_pruner(config: ExperimentConfig) -> BasePruner | None:
    """The experiment's early-stopping rule: its assessor, or its advisor's; None for neither."""
    if config.assessor is not None:
        return _assessor(config.assessor)
    if config.advisor is not None:
        return _advisor(config.advisor)
    return None


def _assessor(assessor: AlgorithmConfig) -> BasePruner:
    name = algorithm_spec(assessor, "assessor").name
    args = assessor.class_args
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

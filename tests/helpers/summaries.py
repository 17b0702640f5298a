"""End-step summaries (trialflow.runs.summary.ExperimentSummary) for tests of what reads them:
publishing, the asset reader, lineage. Whole, as the end step writes them."""

from __future__ import annotations

from typing import Any

from trialflow.runs.summary import BestTrial, ExperimentSummary

BEST = BestTrial(
    trial_index=3, trial_id="t-3", parameters={"C": 2.5, "kernel": "rbf"}, final_metric=0.97, final_extra={}
)


def summary(**changes: Any) -> ExperimentSummary:
    """An over experiment whose best (this run's and the study's) is BEST, with ``changes``."""
    base = ExperimentSummary(
        experiment_id="exp-1",
        experiment_name="digits",
        optimize_mode="maximize",
        status_counts={"SUCCEEDED": 1},
        best=BEST,
        study_best=BEST,
        trials=[],
        continuation={"run_id": None, "conf": {}, "reason": "the experiment is over"},
        stopped=None,
    )
    return base | changes  # type: ignore[return-value]

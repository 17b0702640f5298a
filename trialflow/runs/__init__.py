"""A DAG run's part of an experiment, decided in one place: start, end, stop, go on, reconcile.

The start, watch, end and continue steps, the trigger that watches a run, ``trialflow run`` and
whatever stops a run call these and only turn their outcomes into Airflow's words. No Airflow.

* :mod:`.ownership`: which runs may drive an experiment;
* :mod:`.start`: the run's trial indexes and deadline, the experiment opened;
* :mod:`.reconcile`: trials still running whose task has ended are stopped and closed;
* :mod:`.end`: the run's verdict and last writes;
* :mod:`.continuation`: whether the experiment goes on in a follow-on run;
* :mod:`.stop`: a run stopped from outside, its trials cancelled.
"""

from __future__ import annotations

from trialflow.runs.continuation import (
    CONTINUES_KEY,
    Continuation,
    continuation,
    continuation_run_id,
    continued_run,
    next_run_id,
)
from trialflow.runs.end import (
    RunClosed,
    RunEnded,
    RunHasNoTrials,
    RunSummary,
    close_run,
    end_run,
    mark_ended,
    summarize_run,
)
from trialflow.runs.ownership import ExperimentNotOwned, check_owner
from trialflow.runs.start import RunStart, allot_window, start_run
from trialflow.runs.stop import cancel_trials, stop_run

__all__ = [
    "CONTINUES_KEY",
    "Continuation",
    "ExperimentNotOwned",
    "RunClosed",
    "RunEnded",
    "RunHasNoTrials",
    "RunStart",
    "RunSummary",
    "allot_window",
    "cancel_trials",
    "check_owner",
    "close_run",
    "continuation",
    "continuation_run_id",
    "continued_run",
    "next_run_id",
    "end_run",
    "mark_ended",
    "start_run",
    "stop_run",
    "summarize_run",
]

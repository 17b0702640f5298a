"""Numbers every layer agrees on, with no imports: the config checks them, the DAG plan and the
experiment use them, so they live below all three."""

from __future__ import annotations

#: Mapped trial tasks one DAG run may hold (maxTrialNumber, trials_per_run).
MAX_TRIALS_PER_RUN = 10_000

#: Finished trials a learning tuner's ask reads at most in a long experiment: the best half and
#: the newest half (trialflow.tuning.history; README's tuner table says which tuners).
HISTORY_LIMIT = 1000

#: Longest maxExperimentDuration a person may set on a running experiment (ten years, in
#: seconds): past it a deadline is no deadline, and huge floats lose the seconds they are added to.
MAX_EXPERIMENT_SECONDS = 10 * 366 * 24 * 3600

"""Numbers every layer agrees on, with no imports: the config checks them, the DAG plan and the
experiment use them, so they live below all three."""

from __future__ import annotations

#: Mapped trial tasks one DAG run may hold (maxTrialNumber, trials_per_run).
MAX_TRIALS_PER_RUN = 10_000

#: Finished trials a learning tuner's ask reads at most in a long experiment: the best half and
#: the newest half (trialflow.tuning.history; the docs' tuner table (docs/reference/algorithms.md) says which tuners).
HISTORY_LIMIT = 1000

#: Longest maxExperimentDuration a person may set on a running experiment (ten years, in
#: seconds): past it a deadline is no deadline, and huge floats lose the seconds they are added to.
MAX_EXPERIMENT_SECONDS = 10 * 366 * 24 * 3600

#: Asked-for trials (added or re-run) one experiment may have waiting at once: each grows
#: maxTrialNumber by one and waits for a trial index; a thousand queued in a minute was a
#: person's budget gone and a page answer of 150 KB. Those waiting when the experiment ends are
#: dropped (and said so in its history).
MAX_WAITING_TRIALS = 100

#: Largest body an action route reads (a trial's parameters, limits): far above any real one.
MAX_ACTION_BODY = 64 * 1024

#: Seconds the end's MLflow step (log_to_mlflow) goes on trying a tracking server that does not
#: take every result, before it is skipped saying so (a DAG run held longer holds up the DAG's
#: next run where max_active_runs is 1); `trialflow run` says it waits, and how long at most.
TRACKING_GIVE_UP_SECONDS = 1800.0

#: One copy into the artifact store (a checkpoint, a trial's artifacts) may take this many
#: seconds, and one more for every COPY_BYTES_PER_SECOND bytes, before its follower goes on
#: without it (trialflow.checkpoints.copy_time): a store answering 500 held a follower in its
#: SDK's retries for ~3 minutes per checkpoint.
COPY_SECONDS_FLOOR = 30.0
COPY_BYTES_PER_SECOND = 5 * 1024 * 1024

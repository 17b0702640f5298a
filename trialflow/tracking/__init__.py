"""Tracking: each experiment one MLflow run, each trial a nested run under it, logged from the
Airflow side through an outbox in the experiment store (trialflow.tracking.sync). No Airflow."""

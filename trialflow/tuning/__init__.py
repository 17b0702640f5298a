"""Tuners, assessors and advisors on Optuna, above the store (trialflow.store): the asker,
the algorithms, the model samplers, PBT and the user's own classes. No Airflow imports."""

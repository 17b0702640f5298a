"""Airflow operators: thin shells over trialflow.experiment."""

"""Sensors: the same wait as SubmitTrialOperator's, for submit-now-wait-elsewhere DAGs."""

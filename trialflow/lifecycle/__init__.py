"""A trial's life from the core's side: start it, wait for it, finish it (trial_lifecycle.py),
and a submitted trial as it travels from the operator to a sensor or the trigger
(submission.py). The operator, the sensor and the trigger are shells over these. No Airflow.
"""

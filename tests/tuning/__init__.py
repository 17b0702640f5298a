"""Search spaces, tuners/assessors on Optuna, the asker, PBT and custom classes. No Airflow imports."""

"""Search spaces, tuners/assessors on Optuna, and the experiment store. No Airflow imports."""

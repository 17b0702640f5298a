"""The ``trialflow`` command line, and what it runs on your machine: commands.py (every command;
``main`` is the console script), runner.py and dag_file_run.py (`trialflow run` of a config or
a DAG file), embedded.py with home_airflow.py, shared_airflow.py, embedded_restarts.py and
embedded_database.py (a home's private, loopback-only Airflow, kept up or not), progress.py
(what a run prints), render.py (`trialflow render`), dag_files.py (the experiments a file
holds). Nothing below this package imports it.

Empty on purpose: ``python -m trialflow.cli`` (``__main__``) and the console script import
commands.py; a component that only needs one of the others (Airflow's scheduler loads
embedded_database's connect arguments) does not pay for the command line.
"""

"""What leaves an experiment for the rest of a pipeline: the published best parameters and
their Asset event's extra (published.py; trialflow.assets names the Assets), and the lineage
Airflow's listeners see (lineage.py).
"""

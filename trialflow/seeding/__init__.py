"""What an experiment starts from besides its tuner: an earlier experiment's best trials
re-tuned (retune.py, ``scheduledRuns: retune``), its results given to the tuner (warm_start.py,
``warmStart``), and NNI's own history imported into the store (nni_import.py). No Airflow.
"""

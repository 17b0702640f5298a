"""From a DAG file to an experiment's tasks: the one converter behind experiment_dag and
ExperimentTaskGroup (converter.py), the DAG file and the config's source (dag_sources.py), and
the plan kept per config so a DAG parse skips the full check (plan.py).
"""

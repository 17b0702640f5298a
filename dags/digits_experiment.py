# An Airflow DAG (the words "airflow" and "dag" let Airflow's safe-mode discovery find it).
from trialflow.dag import experiment_dag

dag = experiment_dag("experiments/digits/config.yml")

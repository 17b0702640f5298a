# An Airflow DAG (the words "airflow" and "dag" let Airflow's safe-mode discovery find it):
# NNI's Population Based Training example, on digits (trialflow.tuning.pbt).
from trialflow.dag import experiment_dag

dag = experiment_dag("experiments/digits-pbt/config.yml")

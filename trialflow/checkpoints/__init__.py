"""A trial's checkpoints: what it keeps and where they live (no Airflow in this package)."""

"""Airflow glue: connections -> clients (the experiment store, later SSH/Kubernetes/HTTP)."""

"""Airflow UI extensions."""

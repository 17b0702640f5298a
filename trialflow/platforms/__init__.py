"""Training services: one module per platform, same shape, no Airflow imports."""

"""The experiment store: persistence, its schema and migrations, read paths. No Airflow imports."""

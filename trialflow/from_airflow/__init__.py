"""What trialflow asks of Airflow's own runtime, besides its connections (those are hooks/):
why Airflow stopped a task (why_stopped), which values its secrets masker hides (secrets), and a
changed trialConcurrency read when the dag-processor parses a DAG file (concurrency_at_parse).
Imported by the Airflow layer alone; each answers the core in its own terms."""

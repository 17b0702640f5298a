"""What trialflow asks of Airflow's own runtime, besides its connections (those are hooks/):
why Airflow stopped a task (why_stopped), which values its secrets masker hides (secrets), its
Fernet key for the runs' secret inputs (fernet), a changed trialConcurrency read when the
dag-processor parses a DAG file (concurrency_at_parse) and that parse asked for until the
scheduler's DAG shows it (parse_requests). Imported by the Airflow layer alone; each answers the
core in its own terms."""

from trialflow.from_airflow.fernet import install as _install_fernet

# Every process of Airflow's that runs trialflow (workers, the triggerer, the api-server, the
# dag-processor) imports this package through the operators, triggers and pages: each seals and
# opens the runs' secret inputs with Airflow's own Fernet key (trialflow.trial.sealing).
_install_fernet()

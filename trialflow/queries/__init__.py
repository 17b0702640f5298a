"""Read models of the experiment store, for the pages, the CLI and exports. No Airflow.

Why plain SQL over Optuna's tables instead of ``study.get_trials()``: a page of
50 trials out of 2,000, sorted by a parameter and filtered by status, must
not load 2,000 trials and 200,000 intermediate values into Python. Every
query here aggregates, sorts, filters and paginates in the database (SQLite
or PostgreSQL), with bound parameters only: a sort key or a search text is
never SQL.

``tables`` declares the schema, ``experiments`` the list and headers, ``trials``
the table and curves, ``charts`` the charts' data (sampled past a cap), ``importance`` and ``export`` the rest.
"""

from __future__ import annotations

from trialflow.queries.charts import CHART_CAP, ChartData, chart_data
from trialflow.queries.experiments import (
    ExperimentRow,
    experiment_config,
    experiment_dag_id,
    experiment_header,
    experiment_summary,
    list_experiments,
    secret_input_values,
)
from trialflow.queries.export import (
    export_csv,
    export_json,
    export_rows,
    iter_csv,
    iter_intermediate_csv,
    iter_json,
    spreadsheet_safe,
)
from trialflow.queries.importance import flatten_parameters, importance
from trialflow.queries.parameter_columns import parameter_paths
from trialflow.queries.tables import (
    ACTIVE,
    INTERMEDIATE,
    MAX_PAGE,
    STATUSES,
    STUDY_ATTRS,
    TRIALS,
    UnknownExperiment,
    optimize_mode,
    study_id_of,
)
from trialflow.queries.trials import (
    DETAIL_POINTS,
    chart_rows,
    curves,
    downsample,
    iter_trial_rows,
    trial_detail,
    trials_page,
)

__all__ = [
    "experiment_config",
    "secret_input_values",
    "ACTIVE",
    "CHART_CAP",
    "DETAIL_POINTS",
    "INTERMEDIATE",
    "MAX_PAGE",
    "STATUSES",
    "STUDY_ATTRS",
    "TRIALS",
    "ChartData",
    "ExperimentRow",
    "UnknownExperiment",
    "chart_data",
    "chart_rows",
    "curves",
    "downsample",
    "experiment_dag_id",
    "experiment_header",
    "experiment_summary",
    "export_csv",
    "export_json",
    "export_rows",
    "iter_csv",
    "iter_intermediate_csv",
    "iter_json",
    "iter_trial_rows",
    "flatten_parameters",
    "importance",
    "list_experiments",
    "optimize_mode",
    "parameter_paths",
    "spreadsheet_safe",
    "study_id_of",
    "trial_detail",
    "trials_page",
]

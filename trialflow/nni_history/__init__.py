"""NNI's experiments as NNI left them (``~/nni-experiments/<id>``), and its export and
"import data" files, read for import. No Airflow."""

from __future__ import annotations

from trialflow.nni_history.database import NniExperiment, NniHistoryError, NniTrial, read_experiment
from trialflow.nni_history.files import read_result_file

__all__ = ["NniExperiment", "NniHistoryError", "NniTrial", "read_experiment", "read_result_file"]

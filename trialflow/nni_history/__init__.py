"""NNI's experiments as NNI left them (``~/nni-experiments/<id>``), read for import. No Airflow."""

from __future__ import annotations

from trialflow.nni_history.database import NniExperiment, NniHistoryError, NniTrial, read_experiment

__all__ = ["NniExperiment", "NniHistoryError", "NniTrial", "read_experiment"]

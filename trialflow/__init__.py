"""trialflow: NNI experiments as Apache Airflow DAGs.

This module stays empty on purpose: ``trialflow.trial`` is imported by every
trial process and must not pay for Airflow, Optuna or pydantic imports.
"""

from __future__ import annotations

__all__ = ["__version__"]
__version__ = "0.2.0"

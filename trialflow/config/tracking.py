"""trialflow's ``mlflow`` key: the MLflow tracking server an experiment is logged to.

NNI had no tracking integration: a team wrote MLflow calls into every trial and lost the link
between the tuning job, its trials and the model it chose. Here the experiment is one MLflow run
and each trial a nested run under it, logged from the Airflow side where trialflow already
holds the results (trialflow.tracking), so a trial that cannot reach the server is logged all
the same and no trial waits for it.

Where the server is: ``connId`` names an Airflow connection (its host, with ``http``/``https``
as its scheme or in ``extra.scheme``; its login and password, or a token as the password with no
login), so no config holds a credential; without it, MLflow's own environment variables
(``MLFLOW_TRACKING_URI``, ``MLFLOW_TRACKING_USERNAME``...) where trialflow logs (the triggerer
and workers). Off by default: an experiment without the key logs nothing.
"""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from trialflow.config.base import NniModel, Str

#: MLflow's own limit on an experiment's and a registered model's name (characters).
MAX_NAME = 250
#: What MLflow accepts in a registered model's name, said in validate's words.
_MODEL_NAME = re.compile(r"^[^/:%]{1,250}$")


class MlflowConfig(NniModel):
    """``mlflow``: ``connId`` (the Airflow connection of the tracking server; default: MLflow's
    environment variables where trialflow logs), ``experimentName`` (the MLflow experiment the
    experiment's run goes into; default: the config's experimentName, else the experiment id)
    and ``registeredModel`` (the model registry's name a person's approval registers the best
    trial's model under; trialflow.assets.register_best_model)."""

    conn_id: Str | None = Field(default=None, min_length=1, max_length=250)
    experiment_name: Str | None = Field(default=None, min_length=1, max_length=MAX_NAME)
    registered_model: Str | None = Field(default=None, min_length=1, max_length=MAX_NAME)

    @field_validator("registered_model")
    @classmethod
    def _a_registry_name(cls, value: str | None) -> str | None:
        if value is not None and not _MODEL_NAME.match(value):
            raise ValueError("expected a registered model's name without '/', ':' or '%' (MLflow refuses them)")
        return value

"""The MLmodel file that makes a model file a trial kept an MLflow Model, written without
loading the model.

A registered version whose source is a single file is no MLflow Model: ``models:/<name>/<v>``
downloaded as an empty folder and ``mlflow.pyfunc.load_model`` failed (no MLmodel), so MLflow's
own consumers (serving, deployment, ``pyfunc``) could not use what an approval promoted. The
version's source is now a folder holding the file, and, where the DAG names the model's flavor,
the MLmodel that flavor's loader reads (MLflow's own ``Model`` and ``pyfunc.add_to_model``
write it). The model is never unpickled here: a trial's artifact is code from whoever wrote the
trial, and the worker that registers it must not run it (MLflow's loaders ask their user to set
``MLFLOW_ALLOW_PICKLE_DESERIALIZATION`` for the same reason). With trialflow.tracking.mlflow_rest,
the only modules that import MLflow (the ``mlflow`` extra).
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

#: The flavors whose MLmodel trialflow writes, by the name a DAG gives: each loads one file.
FLAVORS = ("sklearn",)
MLMODEL = "MLmodel"


class UnknownFlavor(ValueError):
    """A flavor trialflow does not write (the message names those it does)."""


def mlmodel(flavor: str, file_name: str, size: int) -> bytes:
    """The MLmodel text for the file ``file_name`` (``size`` bytes) of flavor ``flavor``:
    scikit-learn's pickled estimator (``mlflow.sklearn`` loads it, and ``pyfunc`` predicts
    with its ``predict``)."""
    if flavor not in FLAVORS:
        raise UnknownFlavor(
            f"flavor {str(flavor)[:50]!r}: trialflow writes the MLmodel of {', '.join(FLAVORS)}, or none"
        )
    from mlflow import pyfunc
    from mlflow.models import Model

    model = Model()
    pyfunc.add_to_model(model, loader_module="mlflow.sklearn", model_path=file_name, predict_fn="predict")
    model.add_flavor(
        "sklearn",
        pickled_model=file_name,
        sklearn_version=_installed("scikit-learn"),
        serialization_format="pickle",
        code=None,
    )
    model.model_size_bytes = size
    return model.to_yaml().encode()


def _installed(distribution: str) -> str | None:
    """The version installed here (the one the trial most likely pickled with), or None."""
    try:
        return version(distribution)
    except PackageNotFoundError:
        return None

"""The MLmodel file trialflow writes for a model file a trial kept (trialflow.tracking.mlflow_model):
read back by MLflow's own Model class as scikit-learn's flavor and pyfunc's, naming the file;
a flavor trialflow does not write is refused by name, bounded."""

from __future__ import annotations

import pytest

from trialflow.tracking.mlflow_model import FLAVORS, UnknownFlavor, mlmodel


@pytest.mark.slow  # imports MLflow
def test_the_sklearn_mlmodel_names_the_file_for_both_loaders(tmp_path):
    from mlflow.models import Model

    (tmp_path / "MLmodel").write_bytes(mlmodel("sklearn", "model.pkl", 1234))
    model = Model.load(str(tmp_path / "MLmodel"))
    assert model.flavors["sklearn"]["pickled_model"] == "model.pkl"
    assert model.flavors["sklearn"]["serialization_format"] == "pickle"
    pyfunc = model.flavors["python_function"]
    assert (pyfunc["loader_module"], pyfunc["model_path"], pyfunc["predict_fn"]) == (
        "mlflow.sklearn",
        "model.pkl",
        "predict",
    )
    assert model.model_size_bytes == 1234
    assert FLAVORS == ("sklearn",)


@pytest.mark.parametrize("flavor", ["tensorflow", "", "sklearn ", "x" * 10_000, "python_function\n", 3, ["sklearn"]])
def test_a_flavor_trialflow_does_not_write_is_refused_by_name(flavor):
    with pytest.raises(UnknownFlavor, match="trialflow writes the MLmodel of sklearn, or none") as raised:
        mlmodel(flavor, "model.pkl", 1)
    assert len(str(raised.value)) < 200

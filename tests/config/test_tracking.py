"""The ``mlflow`` key: off by default, its names checked with validate's words."""

from __future__ import annotations

import pytest

from trialflow.config import ConfigError, load_config

BASE = (
    "searchSpace: {x: {_type: uniform, _value: [0, 1]}}\ntrialCommand: python3 t.py\n"
    "trialConcurrency: 1\nmaxTrialNumber: 2\ntuner: {name: Random}\ntrainingService: {platform: local}\n"
)


def test_off_without_the_key(write):
    assert load_config(write("c.yml", BASE)).mlflow is None


def test_the_key(write):
    config = load_config(
        write(
            "c.yml", BASE + "mlflow: {connId: mlflow_default, experimentName: team/digits, registeredModel: digits}\n"
        )
    )
    assert config.mlflow is not None
    assert (config.mlflow.conn_id, config.mlflow.experiment_name, config.mlflow.registered_model) == (
        "mlflow_default",
        "team/digits",
        "digits",
    )


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("{registeredModel: 'a/b'}", "mlflow.registeredModel: expected a registered model's name"),
        ("{connId: ''}", "mlflow.connId"),
        ("{trackingUri: 'http://u:p@h'}", "mlflow.trackingUri"),
        (f"{{experimentName: '{'x' * 300}'}}", "mlflow.experimentName"),
    ],
)
def test_bad_values_are_named(write, value, said):
    with pytest.raises(ConfigError) as raised:
        load_config(write("c.yml", BASE + f"mlflow: {value}\n"))
    assert said in str(raised.value)
    assert "u:p@" not in str(raised.value)

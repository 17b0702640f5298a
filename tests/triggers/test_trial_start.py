"""TrialStartTrigger's one rule of its own: where it finds the operator's arguments (the
scheduler and the triggerer run it end to end in tests/integration/test_triggered_starts.py)."""

from __future__ import annotations

from types import SimpleNamespace

from trialflow.triggers.trial_start import TrialStartTrigger, operator_argument


def test_a_mapped_tasks_arguments_are_its_partial_ones_and_a_plain_tasks_its_attributes():
    mapped = SimpleNamespace(partial_kwargs={"config_path": "/e/config.yml"}, config_path="not this")
    plain = SimpleNamespace(config_path="/p/config.yml")
    assert operator_argument(mapped, "config_path") == "/e/config.yml"
    assert operator_argument(mapped, "poll_interval", 1.0) == 1.0  # not given: the operator's default
    assert operator_argument(plain, "config_path") == "/p/config.yml"
    assert operator_argument(plain, "store_conn_id", "trialflow_default") == "trialflow_default"


def test_it_serializes_to_what_airflow_recreates_it_from():
    path, kwargs = TrialStartTrigger().serialize()
    assert path == "trialflow.triggers.trial_start.TrialStartTrigger" and kwargs == {}
    assert isinstance(TrialStartTrigger(**kwargs), TrialStartTrigger)

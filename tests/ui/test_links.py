"""The trial tasks' extra links as the plugin gives them (trialflow.ui.plugin): Airflow matches
a plugin's link to a serialized task by its class's name and module, so the plugin's names must
be the operators' own."""

from __future__ import annotations

from trialflow.operators.trial import SubmitTrialOperator, TriggeredTrialOperator
from trialflow.ui.plugin import TRIAL_OPERATORS, TrialPageLink


def test_the_plugins_trial_link_names_both_trial_operators_as_airflow_matches_them():
    named = {(op.__module__, op.__name__) for op in TrialPageLink.operators}
    real = {(op.__module__, op.__name__) for op in (SubmitTrialOperator, TriggeredTrialOperator)}
    assert named == real and len(TRIAL_OPERATORS) == 2


def test_the_trial_link_needs_only_the_task_instances_key():
    from airflow.models.taskinstancekey import TaskInstanceKey

    key = TaskInstanceKey("dag_a", "trial", "manual__1", 1, 3)
    assert TrialPageLink().get_link(None, ti_key=key) == "/plugin/trialflow?dag_id=dag_a&run_id=manual__1&map_index=3"

"""The trial tasks' extra links as the plugin gives them (trialflow.ui.plugin): Airflow matches
a plugin's link to a serialized task by its class's name and module, so the plugin's names must
be the operators' own."""

from __future__ import annotations

from types import SimpleNamespace

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


def test_the_platform_link_is_the_attempts_own_page_without_a_request():
    """A worker's attempt that submitted its trial knows its page: the link Airflow writes at
    the attempt's end is made from it, with no XCom read through the api-server (outside a task,
    as here, a read would fail)."""
    from airflow.models.taskinstancekey import TaskInstanceKey

    from trialflow.ui.links import PlatformLink

    key = TaskInstanceKey("dag_a", "trial", "manual__1", 1, 3)
    page = "https://platform.example/jobs/e/e-0003"
    assert PlatformLink().get_link(SimpleNamespace(platform_web_url=page), ti_key=key) == page
    assert PlatformLink().get_link(SimpleNamespace(platform_web_url=""), ti_key=key) == ""
    assert PlatformLink().get_link(SimpleNamespace(platform_web_url="javascript:alert(1)"), ti_key=key) == ""


def test_a_serialized_trial_task_has_both_links_and_writes_only_the_platforms():
    """The operator lists only "Platform" (written to XCom by the attempt); "Trial" is the
    plugin's, which the api-server's copy of the task carries for both trial operators."""
    from airflow.sdk import DAG
    from airflow.serialization.serialized_objects import DagSerialization

    with DAG("links_dag", schedule=None) as dag:
        SubmitTrialOperator.partial(task_id="trial", config_path="c.yml").expand(trial_index=[0, 1])
        TriggeredTrialOperator(task_id="one", config_path="c.yml", trial_index=0)
    assert [type(link).__name__ for link in SubmitTrialOperator.operator_extra_links] == ["PlatformLink"]
    served = DagSerialization.from_dict(DagSerialization.to_dict(dag))
    for task_id in ("trial", "one"):
        assert served.get_task(task_id).extra_links == ["Platform", "Trial"], task_id

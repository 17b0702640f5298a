"""The downstream helper over Airflow's own asset-event accessors (built here from Airflow's
own models, as the task runner builds them) and the publishing step's outlet."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from airflow.sdk import Asset
from airflow.sdk.execution_time.context import TriggeringAssetEventsAccessor

from tests.helpers.assets import event, published
from tests.helpers.dags import write_config
from trialflow.assets import NotPublished, best_parameters, best_parameters_asset
from trialflow.dag import experiment_dag

T0 = datetime(2026, 11, 25, tzinfo=UTC)


def test_the_newest_triggering_event_is_read():
    asset = best_parameters_asset("dag_a")
    events = TriggeringAssetEventsAccessor.build(
        [
            event(asset, published({"C": 1}, "r1"), T0),
            event(asset, published({"C": 2}, "r2"), T0 + timedelta(minutes=1)),
        ]
    )
    best = best_parameters({"triggering_asset_events": events})
    assert (best.parameters, best.run_id) == ({"C": 2}, "r2")
    assert best_parameters({"triggering_asset_events": events}, asset).parameters == {"C": 2}


def test_with_several_assets_the_named_one_is_read():
    a, b = best_parameters_asset("dag_a"), best_parameters_asset("dag_b")
    other = Asset("raw-data")
    events = TriggeringAssetEventsAccessor.build(
        [
            event(a, published({"C": 1}, "ra"), T0 + timedelta(minutes=5)),
            event(b, published({"C": 7}, "rb", "dag_b"), T0, source="dag_b"),
            event(other, {"rows": 10}, T0 + timedelta(minutes=9)),  # not trialflow's: ignored
        ]
    )
    assert best_parameters({"triggering_asset_events": events}, b).parameters == {"C": 7}
    assert best_parameters({"triggering_asset_events": events}).parameters == {"C": 1}


def test_a_result_not_emitted_by_the_dag_it_names_is_refused():
    """Anyone allowed to create asset events through the REST API could forge an extra; only
    an event the named experiment DAG emitted is read."""
    asset = best_parameters_asset("dag_a")
    forged = published({"C": 99}, "r9")
    for source in (None, "dag_evil"):
        events = TriggeringAssetEventsAccessor.build([event(asset, forged, T0, source=source)])
        with pytest.raises(NotPublished, match="not emitted by the experiment DAG the asset is for"):
            best_parameters({"triggering_asset_events": events})
    mixed = TriggeringAssetEventsAccessor.build(
        [event(asset, published({"C": 1}, "r1"), T0), event(asset, forged, T0 + timedelta(minutes=1), source=None)]
    )
    assert best_parameters({"triggering_asset_events": mixed}).parameters == {"C": 1}  # the genuine one


def test_no_event_names_what_was_looked_at():
    asset = best_parameters_asset("dag_a")
    with pytest.raises(NotPublished, match="no event of asset 'trialflow/dag_a/best'"):
        best_parameters({"triggering_asset_events": TriggeringAssetEventsAccessor.build([])}, asset)
    with pytest.raises(NotPublished, match="no event of a trialflow experiment's asset"):
        best_parameters({})


def test_a_task_with_the_asset_as_inlet_reads_its_newest_event():
    asset = best_parameters_asset("dag_a")
    inlets = {asset: [event(asset, published({"C": 3}, "r3"), T0)]}
    best = best_parameters({"triggering_asset_events": {}, "inlet_events": inlets}, asset)
    assert best.parameters == {"C": 3}


def test_the_experiment_dag_publishes_on_its_asset(tmp_path):
    dag = experiment_dag(write_config(tmp_path))
    publish = dag.get_task("publish_best")
    assert publish.upstream_task_ids == {"end_experiment"} and publish.trigger_rule == "all_success"
    assert [o.name for o in publish.outlets] == ["trialflow/trialflow_my_exp/best"]
    named = experiment_dag(write_config(tmp_path), asset_name="models/svc-params").get_task("publish_best")
    assert [o.name for o in named.outlets] == ["models/svc-params"]
    assert best_parameters_asset("trialflow_my_exp", "models/svc-params") == named.outlets[0]


def test_a_groups_published_result_is_read_inside_its_own_dag_with_its_artifacts():
    """ExperimentTaskGroup.published hands a task of the same DAG the publish step's XCom (the
    Asset event's extra): read without an inlet, its artifacts opened through their store."""
    from tests.helpers.summaries import summary
    from trialflow.assets import NotPublished, best_artifact, published
    from trialflow.outputs.published import ArtifactsOfBest, PublishedArtifact, publication

    kept = ArtifactsOfBest("t-3", "file:///models/tuning", None, (PublishedArtifact("model.pkl", 1234),))
    extra, _ = publication(summary(), "pipeline", "run_1", None, None, kept)
    best = published(extra)
    assert best.parameters == {"C": 2.5, "kernel": "rbf"} and best.trial_id == "t-3"
    assert str(best_artifact(best, "model.pkl")).endswith("/model.pkl")
    with pytest.raises(KeyError, match="model.pkl"):
        best_artifact(best, "../../etc/passwd")
    with pytest.raises(NotPublished, match="the experiment group's published result"):
        published({"C": 2.5})  # tune.best's parameters are not a published result

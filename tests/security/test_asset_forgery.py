"""Another DAG publishing on your asset (issue 37, item 1).

``experiment_dag(C, dag_id="forger_c", asset_name="trialflow/exp_a/best")`` made exp_a's
downstream train on C's parameters: the reader compared an event's source DAG with the DAG
named in the event's own extra, which C wrote. Now an asset trialflow names for a DAG is that
DAG's alone: the forging DAG does not parse, and the reader accepts only events the asset's own
DAG emitted, whatever the extra says. Events are built from Airflow's own models, as the task
runner builds them.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from airflow.sdk.execution_time.context import TriggeringAssetEventsAccessor

from tests.helpers.assets import event, published
from tests.helpers.dags import write_config
from trialflow.assets import NotPublished, best_parameters, best_parameters_asset
from trialflow.dag import experiment_dag

T0 = datetime(2026, 11, 26, tzinfo=UTC)


@pytest.mark.parametrize("name", ["trialflow/exp_a/best", "trialflow/exp_a/other", "trialflow/", "trialflow//best"])
def test_an_experiment_dag_may_not_publish_on_another_dags_asset(tmp_path, name):
    with pytest.raises(ValueError, match=r"asset_name: .* is in trialflow's namespace but not DAG 'forger_c'"):
        experiment_dag(write_config(tmp_path), dag_id="forger_c", asset_name=name)


def test_its_own_name_and_names_outside_the_namespace_are_allowed(tmp_path):
    own = experiment_dag(write_config(tmp_path), dag_id="exp_c", asset_name="trialflow/exp_c/best")
    assert [o.name for o in own.get_task("publish_best").outlets] == ["trialflow/exp_c/best"]
    custom = experiment_dag(write_config(tmp_path), dag_id="exp_c", asset_name="models/c")
    (outlet,) = custom.get_task("publish_best").outlets
    assert (outlet.name, outlet.extra) == ("models/c", {"trialflow_dag_id": "exp_c"})


def test_an_event_from_another_dag_on_a_trialflow_asset_is_refused_whatever_its_extra_says():
    """The forger's own extra names itself (dag_id forger_c) and it emitted the event: the old
    check (source == extra's dag) passed. The asset is exp_a's: refused."""
    asset = best_parameters_asset("exp_a")
    forged = event(asset, published({"C": 99}, "rf", "forger_c"), T0 + timedelta(minutes=1), source="forger_c")
    genuine = event(asset, published({"C": 1}, "r1", "exp_a"), T0, source="exp_a")
    alone = TriggeringAssetEventsAccessor.build([forged])
    for context_asset in (None, asset):
        with pytest.raises(
            NotPublished, match="asset 'trialflow/exp_a/best' belongs to DAG 'exp_a'; emitted by 'forger_c'"
        ):
            best_parameters({"triggering_asset_events": alone}, context_asset)
    # Beside a genuine event, the newer forged one is passed over: the genuine one is read.
    both = TriggeringAssetEventsAccessor.build([genuine, forged])
    assert best_parameters({"triggering_asset_events": both}).parameters == {"C": 1}
    assert best_parameters({"triggering_asset_events": both}, asset).parameters == {"C": 1}


def test_a_custom_named_asset_is_read_only_with_its_owner_known():
    """A name outside trialflow's namespace says no owner: the downstream passes the asset it
    scheduled on (best_parameters_asset(dag_id, name) carries the DAG), or nothing is read."""
    asset = best_parameters_asset("exp_a", "models/a")
    genuine = event(asset, published({"C": 1}, "r1", "exp_a"), T0, source="exp_a")
    forged = event(asset, published({"C": 99}, "rf", "forger_c"), T0 + timedelta(minutes=1), source="forger_c")
    events = TriggeringAssetEventsAccessor.build([genuine, forged])
    assert best_parameters({"triggering_asset_events": events}, asset).parameters == {"C": 1}
    with pytest.raises(NotPublished, match="not named for a DAG: pass asset=best_parameters_asset"):
        best_parameters({"triggering_asset_events": events})
    only_forged = TriggeringAssetEventsAccessor.build([forged])
    with pytest.raises(NotPublished, match="belongs to DAG 'exp_a'; emitted by 'forger_c'"):
        best_parameters({"triggering_asset_events": only_forged}, asset)

"""Population Based Training under the real scheduler: the digits example's trial (written like
NNI's mnist-pbt one) runs two generations of four with three at a time. A second-generation task
that starts while the first generation runs waits holding no slot of trialConcurrency (started by
a worker it is rescheduled; in the triggerer, the default, it waits deferred), so the first
generation's last trial always gets one, then starts from its parent's checkpoint; the DAG run
succeeds."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.airflow import PY, Harness
from trialflow.platforms.base import experiment_id_for

pytestmark = pytest.mark.integration

EXAMPLE = Path(__file__).resolve().parents[2] / "dags" / "experiments" / "digits-pbt"


def test_two_generations_of_four_run_with_three_slots(harness: Harness):
    pytest.importorskip("sklearn")
    config = (
        f"searchSpaceFile: search_space.json\ntrialCommand: {PY} train.py\ntrialCodeDirectory: .\n"
        "trialConcurrency: 3\nmaxTrialNumber: 8\n"
        "tuner: {name: PBTTuner, classArgs: {optimize_mode: maximize, population_size: 4}}\n"
        "trainingService: {platform: local}\n"
    )
    files = {name: (EXAMPLE / name).read_text() for name in ("train.py", "search_space.json")}
    dag_id, run_id = harness.start("pbt_runs", config, files)
    seen: set[str] = set()

    def watch(_: str) -> None:
        seen.update(f"{ti['map_index']}:{ti['state']}" for ti in harness.tis(dag_id, run_id))

    _, state = harness.wait(dag_id, run_id, timeout=300, on_tick=watch)
    assert state == "success"
    rows = harness.rows(dag_id, run_id)
    assert [r.status for r in rows] == ["SUCCEEDED"] * 8
    # generation 1's tasks waited for generation 0 without holding a slot: started by workers
    # they are rescheduled; started in the triggerer (the default here) they wait deferred, and
    # every one of them loaded its parent's last checkpoint (below), so it began after it
    waited = ":up_for_reschedule" if any(s.endswith(":up_for_reschedule") for s in seen) else ":deferred"
    assert any(s.endswith(waited) and int(s.split(":")[0]) >= 4 for s in seen), sorted(seen)
    store = harness.store
    experiment_id = experiment_id_for(dag_id, run_id)
    records = [store.trial(store.find_trial_id(experiment_id, i)) for i in range(8)]
    for record in records[4:]:
        lineage = record.lineage
        assert lineage is not None and lineage.generation == 1 and lineage.loaded_step == 1, lineage
        assert lineage.parent_index is not None and lineage.parent_index < 4
    assert sum(r.lineage.exploited for r in records[4:]) == 1
    xcom = harness.xcom(dag_id, run_id, "trial", 7)
    assert xcom["status"] == "SUCCEEDED"

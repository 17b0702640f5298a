"""What a trial task's start takes from Airflow's context (trialflow.triggers.task_context): in
the triggerer, one store per store URL and one experiment per config and run, for every trigger."""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace

import pytest

from trialflow.store.experiment_store import sqlite_url
from trialflow.triggers import task_context
from trialflow.triggers.task_context import TriggerContext, shared_experiment, shared_store

CONFIG = (
    "searchSpace: {x: {_type: uniform, _value: [0, 1]}}\n"
    f"trialCommand: {sys.executable} -c pass\ntrialConcurrency: 2\nmaxTrialNumber: 3\n"
    "tuner: {name: Random}\ntrainingService: {platform: local}\n"
)


def _context(run_id: str, conf: dict | None = None) -> dict:
    return {"dag": SimpleNamespace(dag_id="shared"), "run_id": run_id, "dag_run": SimpleNamespace(conf=conf or {})}


def test_the_triggers_of_a_store_share_it_until_its_connection_changes(tmp_path, monkeypatch):
    def point_at(name: str) -> None:
        url = sqlite_url(tmp_path / name)
        monkeypatch.setenv(
            "AIRFLOW_CONN_SHARED_STORE", json.dumps({"conn_type": "trialflow", "extra": {"storage_url": url}})
        )

    point_at("a.db")
    first = shared_store("shared_store")
    assert shared_store("shared_store") is first
    point_at("b.db")  # in the environment: seen at once
    assert shared_store("shared_store") is not first and "b.db" in shared_store("shared_store").url


def test_a_connection_elsewhere_is_resolved_again_after_its_time(tmp_path, monkeypatch):
    from trialflow.hooks import experiment_store

    urls = [sqlite_url(tmp_path / "a.db")]
    monkeypatch.setattr(experiment_store.ExperimentStoreHook, "storage_url", lambda self: urls[0])
    monkeypatch.setattr(task_context, "CONNECTION_SECONDS", 3600.0)
    first = shared_store("elsewhere_store")
    urls[0] = sqlite_url(tmp_path / "b.db")  # changed in the metadata database, say
    assert shared_store("elsewhere_store") is first  # resolved a moment ago: not asked again
    monkeypatch.setattr(task_context, "CONNECTION_SECONDS", 0.0)  # its time is up
    assert "b.db" in shared_store("elsewhere_store").url


def test_a_connection_is_resolved_once_while_it_stands(tmp_path, monkeypatch):
    """In the triggerer each lookup is a round trip to its supervisor: a thousand triggers of
    one store resolve its connection once per CONNECTION_SECONDS, not once each."""
    from trialflow.hooks import experiment_store

    url = sqlite_url(tmp_path / "c.db")
    lookups = []
    monkeypatch.setattr(experiment_store.ExperimentStoreHook, "storage_url", lambda self: lookups.append(1) or url)
    stores = {shared_store("counted_store") for _ in range(100)}
    assert len(stores) == 1 and len(lookups) == 1


def test_threads_that_find_a_connection_missing_together_wait_for_one_lookup(tmp_path, monkeypatch):
    """Fifty starts of a run begin at once, each in a thread: one asks the supervisor, the rest
    take its answer (each lookup is a turn of the supervisor's loop, plus one per secret)."""
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    from trialflow.hooks import experiment_store

    url = sqlite_url(tmp_path / "d.db")
    lookups = []
    everyone_in = threading.Barrier(20)

    def slow_lookup(self) -> str:
        lookups.append(1)
        time.sleep(0.2)  # a round trip to a busy supervisor
        return url

    def start(_: int):
        everyone_in.wait()
        return shared_store("together_store")

    monkeypatch.setattr(experiment_store.ExperimentStoreHook, "storage_url", slow_lookup)
    with ThreadPoolExecutor(20) as pool:
        stores = set(pool.map(start, range(20)))
    assert len(stores) == 1 and len(lookups) == 1


def test_the_triggers_of_a_run_share_its_experiment_and_an_edited_config_is_read_again(tmp_path):
    path = tmp_path / "config.yml"
    path.write_text(CONFIG)
    first = shared_experiment(str(path), _context("r1"))
    assert shared_experiment(str(path), _context("r1")) is first
    assert shared_experiment(str(path), _context("r2")) is not first  # another run
    assert shared_experiment(str(path), _context("r1", {"experiment_id": "eother"})) is not first  # its conf
    path.write_text(CONFIG.replace("maxTrialNumber: 3", "maxTrialNumber: 30"))
    edited = shared_experiment(str(path), _context("r1"))
    assert edited is not first and edited.config.max_trial_number == 30


class _RuntimeTi:
    """The runtime task instance's parts a trigger's context reads, counting whole builds."""

    def __init__(self, run_id: str, conf: dict | None = None, invalid: bool = False):
        self.run_id, self.invalid, self.builds = run_id, invalid, 0
        self.task = SimpleNamespace(dag=SimpleNamespace(dag_id="lazy"))
        self._ti_context_from_server = SimpleNamespace(dag_run=SimpleNamespace(conf=conf or {}))

    def get_template_context(self) -> dict:
        self.builds += 1
        if self.invalid:
            raise ValueError("param 'lr' is not a number")  # Airflow's params checked against the conf
        return {**_context(self.run_id), "dag": self.task.dag, "ds": "2026-12-07"}


def test_a_trigger_context_answers_a_start_without_building_airflows_whole_context():
    ti = _RuntimeTi("r1", {"experiment_id": "eother"})
    context = TriggerContext(ti)
    assert context["ti"] is ti and context["task_instance"] is ti
    assert context["dag"].dag_id == "lazy" and context["run_id"] == "r1"
    assert context.get("dag_run").conf == {"experiment_id": "eother"}
    assert ti.builds == 0
    assert context["ds"] == "2026-12-07" and ti.builds == 1  # any other key: the whole context, once
    assert "ds" in context and len(context) == 4 and ti.builds == 1
    bare = SimpleNamespace(run_id="r1", task=ti.task, get_template_context=lambda: {"dag_run": "whole"})
    assert TriggerContext(bare)["dag_run"] == "whole"  # no server context: Airflow's own answers


def test_the_start_that_loads_a_runs_experiment_checks_its_params_and_the_rest_do_not_build_them(tmp_path):
    path = tmp_path / "config.yml"
    path.write_text(CONFIG)
    with pytest.raises(ValueError, match="'lr'"):
        shared_experiment(str(path), TriggerContext(_RuntimeTi("lazy-bad", invalid=True)))
    first_ti = _RuntimeTi("lazy-run")
    first = shared_experiment(str(path), TriggerContext(first_ti))
    assert first_ti.builds == 1 and first.config.max_trial_number == 3
    later = [_RuntimeTi("lazy-run") for _ in range(5)]
    assert all(shared_experiment(str(path), TriggerContext(ti)) is first for ti in later)
    assert [ti.builds for ti in later] == [0] * 5


def test_the_runtime_task_instance_still_keeps_its_dag_run_where_the_context_reads_it():
    """TriggerContext reads the DAG run from a private attribute of Airflow's runtime task
    instance (and builds the whole context where it is missing): an Airflow that renames it
    fails here, not silently slower."""
    from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

    assert "_ti_context_from_server" in RuntimeTaskInstance.__private_attributes__

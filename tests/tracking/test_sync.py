"""The tracking sync against a real MLflow server (``mlflow server``, SQLite backend, on
127.0.0.1), read back through MLflow's own client: an experiment of six trials (one
early-stopped, one failed, one added by hand, one still running) becomes a parent run and six
nested runs with every step of every curve, the tags that link back, and the best tagged; a
second pass sends nothing; the server stopped mid-experiment loses nothing and duplicates
nothing; an answer lost after the server made a run does not make a second one."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from tests.helpers.filled_store import SPACE
from tests.helpers.tracked_store import EXPERIMENT, add_trial, six_trials, tracked_settings
from trialflow.platforms.base import TrialStatus
from trialflow.steering.base import history
from trialflow.tracking.mlflow_rest import MlflowRest, TrackingUnavailable
from trialflow.tracking.outbox import Outbox
from trialflow.tracking.sync import AWAY_ATTR, SyncReport, pass_spacing, sync_experiment
from trialflow.tracking.target import TrackingTarget
from trialflow.trial.protocol import Metric


def _runs(client, name: str) -> tuple[object, list]:
    experiment = client.get_experiment_by_name(name)
    runs = client.search_runs([experiment.experiment_id], max_results=1000)
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(parents) == 1, [r.data.tags for r in parents]
    return parents[0], sorted(children, key=lambda r: int(r.data.tags["trialflow.trial_index"]))


def _history(client, run, key: str = "intermediate") -> list[tuple[int, float]]:
    return [(m.step, m.value) for m in sorted(client.get_metric_history(run.info.run_id, key), key=lambda m: m.step)]


@pytest.mark.slow
def test_six_trials_become_a_parent_and_six_nested_runs(store, mlflow_server):
    name = f"track-{uuid.uuid4().hex[:8]}"
    six_trials(store)
    client = MlflowRest(TrackingTarget(mlflow_server.url, name))
    report = sync_experiment(store, tracked_settings(name, "RUNNING"), client)
    assert (report.passed, report.pending, report.error) == (True, 0, None)
    mlflow = mlflow_server.client()
    parent, trials = _runs(mlflow, name)
    assert parent.data.tags["trialflow.experiment_id"] == EXPERIMENT
    assert parent.data.tags["trialflow.best_trial"] == f"{EXPERIMENT}-0004"
    assert parent.data.params["tuner"] == "Random"
    assert parent.info.status == "RUNNING"
    assert [r.data.tags["mlflow.parentRunId"] for r in trials] == [parent.info.run_id] * 6
    # every step of every curve, once
    assert _history(mlflow, trials[0]) == [(0, 0.1), (1, 0.2), (2, 0.3), (3, 0.4), (4, 0.5)]
    assert _history(mlflow, trials[4]) == [(0, 0.4), (1, 0.8), (2, 0.9), (3, 0.95)]
    assert _history(mlflow, trials[5]) == [(0, 0.1), (1, 0.15)]
    assert trials[0].data.metrics["final"] == 0.55
    assert "final" not in trials[2].data.metrics and "final" not in trials[5].data.metrics
    statuses = [(r.info.status, r.data.tags["trialflow.status"]) for r in trials]
    assert statuses == [
        ("FINISHED", "SUCCEEDED"),
        ("KILLED", "EARLY_STOPPED"),
        ("FAILED", "FAILED"),
        ("FINISHED", "SUCCEEDED"),
        ("FINISHED", "SUCCEEDED"),
        ("RUNNING", "RUNNING"),
    ]
    assert [r.data.tags["trialflow.origin"] for r in trials] == ["tuner"] * 3 + ["added by hand"] + ["tuner"] * 2
    assert [r.data.tags["trialflow.best"] for r in trials] == ["false"] * 4 + ["true", "false"]
    tags = trials[3].data.tags
    assert (tags["trialflow.dag_id"], tags["trialflow.dag_run_id"], tags["trialflow.task_id"]) == (
        "dag_track",
        "manual__1",
        "trial",
    )
    assert (tags["trialflow.map_index"], tags["trialflow.try_number"]) == ("3", "1")
    assert tags["trialflow.page"].endswith("map_index=3")
    assert tags["trialflow.artifacts"] == f"abfs://kept/{EXPERIMENT}/{EXPERIMENT}-0003"
    assert trials[3].data.params["lr"] == "0.01" and trials[3].data.params["opt/_name"] == "adam"
    assert trials[0].info.end_time and trials[0].info.start_time
    # a second pass has nothing to send
    again = sync_experiment(store, tracked_settings(name, "RUNNING"), client)
    assert (again.sent, again.pending) == (0, 0)
    assert len(mlflow.search_runs([parent.info.experiment_id])) == 7


@pytest.mark.slow
def test_the_running_trial_goes_on_and_the_best_moves(store, mlflow_server):
    name = f"track-{uuid.uuid4().hex[:8]}"
    six_trials(store)
    client = MlflowRest(TrackingTarget(mlflow_server.url, name))
    sync_experiment(store, tracked_settings(name), client)
    running = store.find_trial(EXPERIMENT, 5)
    store.record_metrics(
        running.storage_id, [Metric("PERIODICAL", s, v) for s, v in [(2, 0.4), (3, 0.5), (4, 0.6), (5, 0.7)]]
    )
    store.finish(running.storage_id, TrialStatus.SUCCEEDED, 0.99)
    report = sync_experiment(store, tracked_settings(name, "FINISHED"), client)
    assert report.sent == 3  # the new best, the old best unmarked, the experiment's run
    mlflow = mlflow_server.client()
    parent, trials = _runs(mlflow, name)
    assert _history(mlflow, trials[5]) == [(0, 0.1), (1, 0.15), (2, 0.4), (3, 0.5), (4, 0.6), (5, 0.7)]
    # each step stamped with when it reached the store (issue 64, 2: all were the trial's start
    # plus a millisecond a step), the steps of the second pass later than the first pass's
    stamps = {m.step: m.timestamp for m in mlflow.get_metric_history(trials[5].info.run_id, "intermediate")}
    stored = store.result_times(running.storage_id)
    assert stamps == {step: int(at * 1000) for step, at in stored.items()}
    assert stamps[2] == stamps[5] >= stamps[1]
    assert (trials[5].info.status, trials[5].data.metrics["final"]) == ("FINISHED", 0.99)
    assert [r.data.tags["trialflow.best"] for r in trials] == ["false"] * 5 + ["true"]
    assert parent.data.tags["trialflow.best_trial"] == f"{EXPERIMENT}-0005"
    assert parent.info.status == "FINISHED"


@pytest.mark.slow
def test_a_server_stopped_mid_experiment_loses_nothing_and_duplicates_nothing(store, mlflow_server):
    name = f"track-{uuid.uuid4().hex[:8]}"
    six_trials(store)
    client = MlflowRest(TrackingTarget(mlflow_server.url, name))
    sync_experiment(store, tracked_settings(name), client)
    running = store.find_trial(EXPERIMENT, 5)
    mlflow_server.stop()
    try:
        store.record_metrics(running.storage_id, [Metric("PERIODICAL", 2, 0.3)])
        started = time.monotonic()
        away = sync_experiment(store, tracked_settings(name), client)
        assert time.monotonic() - started < 5  # refused at once: nothing waits on it
        assert away.error and "did not answer" in away.error and away.pending >= 1
        store.record_metrics(running.storage_id, [Metric("PERIODICAL", 3, 0.4)])
        store.finish(running.storage_id, TrialStatus.FAILED, None, "lost its machine")
        assert sync_experiment(store, tracked_settings(name), client).error  # still away: said once
    finally:
        mlflow_server.start()
    back = sync_experiment(store, tracked_settings(name), client)
    assert (back.error, back.pending) == (None, 0)
    mlflow = mlflow_server.client()
    _, trials = _runs(mlflow, name)
    assert _history(mlflow, trials[5]) == [(0, 0.1), (1, 0.15), (2, 0.3), (3, 0.4)]
    assert trials[5].info.status == "FAILED"
    lines = [(e["by"], e["action"]) for e in history(store, EXPERIMENT)]
    assert lines.count(("trialflow (MLflow)", "MLflow unreachable")) == 1
    assert lines.count(("trialflow (MLflow)", "MLflow back")) == 1
    assert store.experiment_attr(EXPERIMENT, AWAY_ATTR) is None


class _LosesAnswers(MlflowRest):
    """The server makes the run, and the answer never comes back (a timeout after the commit)."""

    lost = 0

    def create_run(self, experiment_id, start_ms, tags):
        run_id = super().create_run(experiment_id, start_ms, tags)
        if self.lost < 3:
            self.lost += 1
            raise TrackingUnavailable("read timed out")
        return run_id


@pytest.mark.slow
def test_a_run_made_but_not_answered_is_found_not_made_twice(store, mlflow_server):
    name = f"track-{uuid.uuid4().hex[:8]}"
    six_trials(store)
    lossy = _LosesAnswers(TrackingTarget(mlflow_server.url, name))
    for _ in range(4):
        sync_experiment(store, tracked_settings(name), lossy)
    assert lossy.lost == 3
    mlflow = mlflow_server.client()
    _, trials = _runs(mlflow, name)
    assert len(trials) == 6
    assert len({r.data.tags["trialflow.key"] for r in trials}) == 6


@pytest.mark.slow
def test_two_passes_at_once_make_each_run_once(store, mlflow_server):
    name = f"track-{uuid.uuid4().hex[:8]}"
    six_trials(store)
    reports = []

    def one() -> None:
        reports.append(
            sync_experiment(store, tracked_settings(name), MlflowRest(TrackingTarget(mlflow_server.url, name)))
        )

    threads = [threading.Thread(target=one) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sum(r.passed for r in reports) >= 1
    sync_experiment(store, tracked_settings(name), MlflowRest(TrackingTarget(mlflow_server.url, name)))
    mlflow = mlflow_server.client()
    parent, trials = _runs(mlflow, name)
    assert len(trials) == 6
    assert all(len(_history(mlflow, r)) == n for r, n in zip(trials, [5, 3, 1, 3, 4, 2]))
    assert len(Outbox(store.engine, store.study_id(EXPERIMENT)).run_ids()) == 7


def test_where_each_trials_parameters_came_from(store):
    """The tuner's, a person's, a re-run's, NNI's (imported) and a warm start's history."""
    from trialflow.store.prior_trials import PriorTrial
    from trialflow.tracking.sync import best_keys, facts_of

    store.open_experiment(EXPERIMENT, "maximize")
    add_trial(store, 0, [0.1], TrialStatus.FAILED)
    store.enqueue(EXPERIMENT, {"lr": 0.01, "opt": {"_name": "adam"}, "act": "relu"}, {"by": "alice", "at": 1.0})
    add_trial(store, 1, [0.2], TrialStatus.SUCCEEDED, 0.2)
    store.enqueue(EXPERIMENT, {"lr": 0.01, "opt": {"_name": "adam"}, "act": "relu"}, {"by": "bob", "rerun_of": 0})
    add_trial(store, 2, [0.3], TrialStatus.SUCCEEDED, 0.3)
    imported = add_trial(store, 3, [0.4], None)
    store.set_attrs(imported, nni_trial_job_id="AbCdE")  # as trialflow import-nni marks it
    store.finish(imported, TrialStatus.SUCCEEDED, 0.1)
    prior = PriorTrial("eold", "eold-0007", {"lr": 0.02, "opt": {"_name": "adam"}, "act": "relu"}, [0.9])
    assert store.add_prior_trials(EXPERIMENT, SPACE, [prior]) == 1
    histories = store.trial_histories(EXPERIMENT)
    tracked = tracked_settings("unused")
    facts = {f.run_key: f for f in (facts_of(h, tracked) for h in histories)}
    origins = {key: f.origin for key, f in facts.items()}
    (prior_key,) = [k for k in origins if k.startswith("prior:")]
    assert origins == {
        "0": "tuner",
        "1": "added by hand",
        "2": "re-run",
        "3": "imported from NNI",
        prior_key: "warm-start history",
    }
    assert facts[prior_key].final == 0.9 and facts[prior_key].artifacts is None and facts[prior_key].platform is None
    # the best is a trial of the experiment, never a prior's result
    assert best_keys(histories, tracked) == frozenset({"2"})


def test_several_objectives_tag_the_pareto_set(store):
    from dataclasses import replace

    from trialflow.tracking.sync import best_keys

    store.open_experiment(EXPERIMENT, "maximize")
    finals = [
        {"default": 0.9, "acc": 0.9, "ms": 50.0},
        {"default": 0.8, "acc": 0.8, "ms": 10.0},
        {"default": 0.7, "acc": 0.7, "ms": 60.0},
    ]
    for index, final in enumerate(finals):
        add_trial(store, index, [0.1], None)
        store.finish(store.find_trial(EXPERIMENT, index).storage_id, TrialStatus.SUCCEEDED, final)
    several = replace(
        tracked_settings("unused"),
        objectives=[{"metric": "acc", "mode": "maximize"}, {"metric": "ms", "mode": "minimize"}],
    )
    assert best_keys(store.trial_histories(EXPERIMENT), several) == frozenset({"0", "1"})


@pytest.mark.parametrize(
    ("report", "took", "spacing"),
    [
        (SyncReport(sent=0, read_seconds=0.01), 0.05, 5.0),  # a level pass: the floor
        (SyncReport(sent=0, read_seconds=0.21), 0.3, 5.0),  # 1,000 trials read, nothing sent
        (SyncReport(sent=0, read_seconds=0.9), 1.0, 10.0),  # a long read: ten times it
        (SyncReport(sent=0, read_seconds=0.0), 2.5, 25.0),  # a server answering in 2.5 s: asked less
        # a pass that sent 12 runs in 9 s: the next comes in 7.4 s, not 90 s (an outage was said
        # 90 s after the server went away: issue 64, 2)
        (SyncReport(sent=12, read_seconds=0.05), 9.0, pytest.approx(10 * (0.05 + 8.95 / 13))),
        (None, 3.0, 30.0),  # a pass that raised: its whole time
        (SyncReport(sent=0, read_seconds=7.0), 1.0, 10.0),  # a read said longer than the pass
        (SyncReport(sent=3, read_seconds=-1.0), -1.0, 5.0),  # a clock that stepped back
    ],
)
def test_passes_are_spaced_by_what_each_pass_costs_again(report, took, spacing):
    assert pass_spacing(report, took, 5.0) == spacing

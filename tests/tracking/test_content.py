"""The pure builders of a trial's MLflow run: names and values MLflow accepts, NNI's statuses as
MLflow's, the final result as metrics, batches within MLflow's per-call limits, and tags that
link back with their secrets masked."""

from __future__ import annotations

import posixpath

import pytest

from trialflow.config.redaction import mask_text
from trialflow.platforms.base import TrialStatus
from trialflow.tracking import content
from trialflow.tracking.content import (
    MLFLOW_STATUS,
    LinkBack,
    Metric,
    TaskIdentity,
    TrialFacts,
    batches,
    bounded,
    final_metrics,
    flat_parameters,
    mlflow_name,
    step_metrics,
    trial_params,
    trial_tags,
)


def test_the_limits_are_the_installed_mlflows():
    validation = pytest.importorskip("mlflow.utils.validation")
    assert content.MAX_KEY == validation.MAX_ENTITY_KEY_LENGTH
    assert content.MAX_PARAM_VALUE == validation.MAX_PARAM_VAL_LENGTH
    assert content.MAX_TAG_VALUE == validation.MAX_TAG_VAL_LENGTH
    assert content.MAX_PARAMS_TAGS_PER_BATCH == validation.MAX_PARAMS_TAGS_PER_BATCH
    assert content.MAX_METRICS_PER_BATCH == validation.MAX_METRICS_PER_BATCH


@pytest.mark.parametrize(
    "raw",
    [
        "lr",
        "opt/_name",
        "a b",
        "lr@2",
        "../../etc/passwd",
        "/abs",
        "a//b",
        ".",
        "..",
        "",
        "x" * 400,
        "é中",
        "a:b",
        "\x00\n",
    ],
)
def test_every_name_is_one_mlflow_accepts(raw):
    validation = pytest.importorskip("mlflow.utils.validation")
    name = mlflow_name(raw)
    assert 0 < len(name) <= content.MAX_KEY
    assert validation.validate_param_and_metric_name(name)
    assert not validation.path_not_unique(name), name
    assert posixpath.normpath(name) == name


def test_names_keep_what_is_already_good_and_long_ones_stay_apart():
    assert mlflow_name("opt/_name") == "opt/_name"
    assert mlflow_name("lr@2") == "lr_2"
    a, b = mlflow_name("p" * 300 + "a"), mlflow_name("p" * 300 + "b")
    assert a != b and len(a) == len(b) <= content.MAX_KEY


def test_values_are_cut_to_the_limit_and_the_cut_said():
    assert bounded("abc", 5) == "abc"
    cut = bounded("x" * 7000, content.MAX_PARAM_VALUE)
    assert len(cut) == content.MAX_PARAM_VALUE and cut.endswith("…")


def test_every_nni_status_has_an_mlflow_status():
    assert set(MLFLOW_STATUS) == {s.value for s in TrialStatus}
    assert {MLFLOW_STATUS[s] for s in ("SUCCEEDED", "FAILED", "EARLY_STOPPED", "USER_CANCELED", "SYS_CANCELED")} == {
        "FINISHED",
        "FAILED",
        "KILLED",
    }


def _facts(**changes) -> TrialFacts:
    base = dict(
        run_key="3",
        trial_id="e1-0003",
        trial_index=3,
        parameters={"lr": 0.1},
        status="SUCCEEDED",
        finished=True,
        started_at=1000.0,
        ended_at=1010.0,
        intermediate={0: 0.1, 1: float("nan"), 2: 0.3},
        final=0.5,
        origin="tuner",
    )
    base.update(changes)
    return TrialFacts(**base)


def test_steps_after_the_last_sent_in_order_without_non_finite_values():
    facts = _facts()
    assert [(m.step, m.value) for m in step_metrics(facts, -1)] == [(0, 0.1), (2, 0.3)]
    assert [m.step for m in step_metrics(facts, 0)] == [2]
    assert step_metrics(facts, 2) == []
    # stamped from the trial's start: sent twice, the same metric
    assert step_metrics(facts, -1) == step_metrics(facts, -1)
    assert step_metrics(facts, -1)[0].timestamp == 1_000_000


def test_each_step_is_stamped_with_when_it_reached_the_store():
    facts = _facts(intermediate={0: 0.1, 1: 0.2, 2: 0.3, 3: 0.4, 4: 0.5})
    reported = {0: 1_700_000_000.25, 1: 1_700_000_001.75, 2: float("nan"), 3: -5.0, 4: 1e300}
    stamps = [m.timestamp for m in step_metrics(facts, -1, reported)]
    # a time that is no time (another writer's store) falls back to the start plus the step
    assert stamps == [1_700_000_000_250, 1_700_000_001_750, 1_000_002, 1_000_003, 1_000_004]
    assert [m.timestamp for m in step_metrics(facts, 2, reported)] == [1_000_003, 1_000_004]
    assert step_metrics(facts, -1, {}) == step_metrics(facts, -1)  # a store without times


@pytest.mark.parametrize(
    ("final", "expected"),
    [
        (0.5, {"final": 0.5}),
        ("0.25", {"final": 0.25}),
        ({"default": 0.9, "loss": 0.1, "note": "x", "bad": float("inf")}, {"final": 0.9, "final/loss": 0.1}),
        ({"loss": 0.2}, {"final/loss": 0.2}),
        (None, {}),
        (True, {}),
        (float("nan"), {}),
        ("1e999", {}),
        ([1, 2], {}),
    ],
)
def test_the_final_result_as_metrics(final, expected):
    metrics = final_metrics(_facts(final=final))
    assert {m.key: m.value for m in metrics} == expected
    assert all(m.step == 3 for m in metrics)  # after the last intermediate step


def test_nested_parameters_are_flattened_and_secrets_masked():
    facts = _facts(
        parameters={"opt": {"_name": "sgd", "m": 0.9}, "cmd": "run --token=abc123", "url": "http://u:pw@h/x"}
    )
    params = trial_params(facts, mask_text)
    assert params["opt/_name"] == "sgd" and params["opt/m"] == "0.9"
    assert "abc123" not in params["cmd"] and "pw" not in params["url"]


def test_thousands_of_parameters_are_bounded():
    assert len(flat_parameters({f"p{i}": i for i in range(5000)})) == content.MAX_PARAMS


def test_tags_link_back_to_the_task_and_its_page():
    task = TaskIdentity("dag", "manual__1", "group.trial", 2, 3)
    links = LinkBack("http://a/exp", lambda t: f"http://a/trial?map_index={t.map_index}")
    tags = trial_tags(_facts(task=task, artifacts="s3://b/e1/e1-0003"), "e1", "parent-run", links, mask_text)
    assert tags["mlflow.parentRunId"] == "parent-run"
    assert tags["trialflow.key"] == "e1/3"
    assert (tags["trialflow.task_id"], tags["trialflow.map_index"], tags["trialflow.try_number"]) == (
        "group.trial",
        "2",
        "3",
    )
    assert tags["trialflow.page"] == "http://a/trial?map_index=2"
    assert tags["trialflow.artifacts"] == "s3://b/e1/e1-0003"
    without_task = trial_tags(_facts(), "e1", "parent-run", links, mask_text)
    assert without_task["trialflow.page"] == "http://a/exp" and "trialflow.dag_id" not in without_task


def test_task_identity_round_trips_and_refuses_what_is_not_one():
    task = TaskIdentity("d", "r", "t", -1, 1)
    assert TaskIdentity.from_attr(task.to_attr()) == task
    assert TaskIdentity.from_attr({"dag_id": "d"}) is None and TaskIdentity.from_attr("x") is None


def test_batches_hold_mlflows_per_call_limits():
    metrics = [Metric("intermediate", 0.0, i, i) for i in range(2500)]
    params = {f"p{i}": "v" for i in range(150)}
    tags = {f"t{i}": "v" for i in range(70)}
    split = batches(metrics, params, tags)
    assert [len(b.metrics) for b in split if b.metrics] == [1000, 1000, 500]
    assert all(len(b.params) + len(b.tags) <= 100 for b in split)
    assert sum(len(b.params) for b in split) == 150 and sum(len(b.tags) for b in split) == 70

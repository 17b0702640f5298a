"""What an experiment publishes for the DAGs downstream (trialflow.outputs.published: no Airflow)."""

from __future__ import annotations

import pytest

from tests.helpers.rows import row
from tests.helpers.summaries import BEST, summary
from trialflow.outputs.published import (
    FORMAT_KEY,
    NotPublished,
    SeveralObjectives,
    asset_name,
    publication,
    read_published,
)


def test_the_best_trial_is_published_with_where_it_came_from():
    extra, reason = publication(summary(), "dag_a", "run_1", "http://h/plugin/trialflow?experiment=exp-1")
    assert extra is not None and "t-3" in reason
    best = read_published(extra)
    assert (best.experiment_id, best.dag_id, best.run_id, best.trial_id, best.trial_index) == (
        "exp-1",
        "dag_a",
        "run_1",
        "t-3",
        3,
    )
    assert best.parameters == {"C": 2.5, "kernel": "rbf"} and best.metric == 0.97
    assert (best.optimize_mode, best.url, best.multi_objective) == ("maximize", extra["url"], False)


def test_the_experiments_best_across_runs_is_published_not_the_last_runs():
    older = {**BEST, "trial_id": "t-0", "trial_index": 0, "final_metric": 0.99}
    extra, _ = publication(summary(study_best=older), "d", "r", None)
    assert extra is not None and extra["trial_id"] == "t-0"


@pytest.mark.parametrize(
    ("changes", "why"),
    [
        ({"continuation": {"run_id": "trialflow__exp-1__from_000100"}}, "goes on in run trialflow__exp-1__from_000100"),
        ({"best": None, "study_best": None}, "no trial of experiment exp-1 succeeded"),
    ],
)
def test_nothing_is_published_and_the_reason_says_why(changes, why):
    extra, reason = publication(summary(**changes), "d", "r", None)
    assert extra is None and why in reason


def test_an_end_step_without_a_summary_publishes_nothing():
    assert publication(None, "d", "r", None)[0] is None


def test_several_objectives_publish_the_pareto_set():
    pareto = [
        {"trial_id": "t-1", "trial_index": 1, "parameters": {"x": 1}, "values": {"acc": 0.9, "latency": 3.0}, "x": 1},
        {"trial_id": "t-2", "trial_index": 2, "parameters": {"x": 2}, "values": {"acc": 0.8, "latency": 1.0}},
    ]
    objectives = [{"metric": "acc", "mode": "maximize"}, {"metric": "latency", "mode": "minimize"}]
    extra, why = publication(summary(objectives=objectives, pareto=pareto), "d", "r", None)
    assert why == "the Pareto set of 2 trial(s) on 2 objectives"
    best = read_published(extra)
    assert best.multi_objective and [p.trial_id for p in best.pareto] == ["t-1", "t-2"]
    assert best.pareto[1].values == {"acc": 0.8, "latency": 1.0}
    assert [o.metric for o in best.objectives] == ["acc", "latency"]
    # Issue 36 (3): no silent single best: the shortcut refuses, naming the choices
    assert "parameters" not in extra and "trial_id" not in extra
    for shortcut in ("parameters", "trial_id", "trial_index", "metric"):
        with pytest.raises(SeveralObjectives, match=r"has 2 objectives \(acc, latency\): no single best trial"):
            getattr(best, shortcut)
    assert best.best_for("acc").trial_id == "t-1" and best.best_for("latency").trial_id == "t-2"
    assert best.member("t-2").parameters == {"x": 2}
    with pytest.raises(KeyError, match="not an objective"):
        best.best_for("loss")
    with pytest.raises(KeyError, match="not in experiment exp-1's Pareto set"):
        best.member("t-9")
    # a template that reads the shortcut fails loudly (Jinja swallows AttributeError only)
    import jinja2

    with pytest.raises(SeveralObjectives):
        jinja2.Template("{{ e.parameters }}").render(e=best)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"note": "someone else's asset"}, "not a trialflow experiment's result"),
        ("text", "not a trialflow experiment's result"),
        ({FORMAT_KEY: 99}, "result format 99, this trialflow reads 1"),
        ({FORMAT_KEY: 1, "experiment_id": "e"}, "extra key 'dag_id': expected text, got None"),
    ],
)
def test_an_event_that_is_not_a_published_result_is_refused_by_name(extra, message):
    with pytest.raises(NotPublished, match=message):
        read_published(extra)


def test_a_mangled_field_is_named():
    extra, _ = publication(summary(), "d", "r", None)
    for key, wrong in (("parameters", [1]), ("trial_index", True), ("metric", "high")):
        with pytest.raises(NotPublished, match=f"extra key '{key}'"):
            read_published({**extra, key: wrong})


@pytest.mark.parametrize(
    "changes",
    [
        {"objectives": [{"metric": "a"}]},
        {"objectives": "ab"},
        {"pareto": [{"trial_id": "t"}]},
        {"pareto": [{"trial_id": "t", "trial_index": "x", "parameters": {}, "values": {}}]},
        {"pareto": [None]},
    ],
)
def test_a_mangled_pareto_set_is_refused_by_name_not_a_traceback(changes):
    extra, _ = publication(summary(), "d", "r", None)
    with pytest.raises(NotPublished, match="extra keys 'objectives'/'pareto'"):
        read_published({**extra, **changes})


def test_the_asset_is_named_after_the_dag():
    assert asset_name("trialflow_digits_svc") == "trialflow/trialflow_digits_svc/best"


def test_the_progress_line_shows_the_pareto_set_not_a_best(capsys):
    """Issue 36 (3): with several objectives the progress line showed a single "best"."""
    from trialflow.cli.progress import RunDisplay

    objectives = [{"metric": "acc", "mode": "maximize"}, {"metric": "latency", "mode": "minimize"}]
    rows = [
        row(0, final_metric=0.9, objective_values=[0.9, 3.0]),
        row(1, final_metric=0.8, objective_values=[0.8, 1.0]),
        row(2, final_metric=0.7, objective_values=[0.7, 2.0]),
        row(3, "RUNNING"),
    ]
    several = RunDisplay(4, objectives=objectives)
    several.update(rows)
    one = RunDisplay(4)
    one.update(rows)
    err = capsys.readouterr().err
    assert "1 running, 0 failed, Pareto set 2" in err and "best 0.9" in err
    assert err.count("best") == 1  # only the one-objective display says best


def test_a_downstream_task_takes_the_best_parameters_or_the_pareto_set():
    """``tune.best`` (the end step's best_parameters XCom): the experiment's best parameters with
    one objective, the whole Pareto set with several, None without a result."""
    from tests.helpers.summaries import summary
    from trialflow.runs.summary import best_parameters

    one = summary()
    assert best_parameters(one) == (one["study_best"] or one["best"])["parameters"]
    assert best_parameters({**one, "best": None, "study_best": None}) is None
    members = [{"trial_index": 0, "trial_id": "e-0000", "parameters": {"x": 1}, "values": {"a": 1.0, "b": 2.0}}]
    several = {**one, "objectives": [{"metric": "a", "mode": "maximize"}, {"metric": "b", "mode": "minimize"}]}
    assert best_parameters({**several, "pareto": members}) == members


def test_a_downstream_task_takes_the_best_value_as_plainly():
    """Issue 46, 12: ``tune.best_value`` (the end step's best_value XCom): the number that made
    the best parameters best, from the same trial (the experiment's best across runs); with
    several objectives the Pareto set's values in ``tune.best``'s order; None without a result."""
    from tests.helpers.summaries import summary
    from trialflow.runs.summary import best_parameters, best_value

    one = summary()
    chosen = one["study_best"] or one["best"]
    assert best_value(one) == chosen["final_metric"] and isinstance(best_value(one), float)
    run_best = {**one["best"], "parameters": {"x": 9}, "final_metric": 0.123}
    study_best = {**one["best"], "parameters": {"x": 1}, "final_metric": 0.987}
    across = {**one, "best": run_best, "study_best": study_best}
    assert (best_parameters(across), best_value(across)) == ({"x": 1}, 0.987)  # one trial, not two
    assert best_value({**one, "best": None, "study_best": None}) is None
    members = [
        {"trial_index": 0, "trial_id": "e-0000", "parameters": {"x": 1}, "values": {"a": 1.0, "b": 2.0}},
        {"trial_index": 3, "trial_id": "e-0003", "parameters": {"x": 2}, "values": {"a": 0.5, "b": 1.0}},
    ]
    several = {**one, "objectives": [{"metric": "a", "mode": "maximize"}, {"metric": "b", "mode": "minimize"}]}
    assert best_value({**several, "pareto": members}) == [{"a": 1.0, "b": 2.0}, {"a": 0.5, "b": 1.0}]
    assert best_value({**several, "pareto": []}) == []


def test_the_best_trials_artifacts_are_published_and_named_inside_its_folder_only():
    from trialflow.outputs.published import ArtifactsOfBest, PublishedArtifact

    files = (PublishedArtifact("model.pkl", 1200), PublishedArtifact("plots/loss.svg", 9))
    mine = ArtifactsOfBest("t-3", "s3://models/team", "s3_models", files)
    extra, reason = publication(summary(), "d", "r", None, artifacts=mine)
    assert extra is not None and "model.pkl, plots/loss.svg" in reason
    best = read_published(extra)
    assert best.artifacts == files and best.artifact_conn_id == "s3_models"
    assert best.artifact_url("plots/loss.svg") == "s3://models/team/exp-1/t-3/artifacts/plots/loss.svg"
    with pytest.raises(KeyError, match="kept no artifact '../t-2/artifacts/model.pkl'"):
        best.artifact_url("../t-2/artifacts/model.pkl")
    # Another trial's artifacts (the best changed since they were listed) are not published.
    other, _ = publication(summary(), "d", "r", None, artifacts=ArtifactsOfBest("t-1", "s3://m", None, files))
    assert other is not None and "artifacts" not in other and read_published(other).artifacts == ()


@pytest.mark.parametrize(
    ("artifacts", "message"),
    [
        ({"store": "s3://m", "files": [{"name": "../../etc/passwd", "size": 1}]}, "leads outside"),
        ({"store": "s3://m", "files": [{"name": "/etc/passwd", "size": 1}]}, "leads outside"),
        ({"store": "s3://m", "files": [{"name": "a//b", "size": 1}]}, "leads outside"),
        ({"store": 3, "files": []}, "expected store, conn_id and files"),
        ({"files": []}, "expected store, conn_id and files"),
        ({"store": "s3://m", "files": [{"name": "m", "size": "big"}]}, "expected store, conn_id and files"),
    ],
)
def test_a_forged_artifact_list_refuses_the_event(artifacts, message):
    extra, _ = publication(summary(), "d", "r", None)
    assert extra is not None
    with pytest.raises(NotPublished, match=message):
        read_published({**extra, "artifacts": artifacts})

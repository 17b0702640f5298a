"""warmStart without Airflow (issue 40, 1): a new experiment starts from an earlier one of its
DAG, trusting its numbers (the tuner learns from them) or only its parameters (they run
again first); checked before anything is written, done once, linked both ways."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from trialflow import queries
from trialflow.config import load_config
from trialflow.config.errors import ConfigError
from trialflow.experiment import Experiment, check_runnable
from trialflow.platforms.base import TrialStatus
from trialflow.runs import start_run
from trialflow.seeding.warm_start import WARM_STARTED_BY, WARM_STARTED_FROM, WarmStartError
from trialflow.store.experiment_store import ExperimentStore
from trialflow.store.prior_trials import PRIOR_ATTR
from trialflow.tuning.asker import ask

SPACE = "searchSpace: {x: {_type: uniform, _value: [0, 10]}, k: {_type: choice, _value: [a, b]}}\n"
CONFIG = """\
trialCommand: python3 t.py
trialConcurrency: 2
maxTrialNumber: 6
tuner: {name: TPE, classArgs: {optimize_mode: maximize, seed: 7}}
trainingService: {platform: local}
"""


def experiment(tmp_path: Path, exp_id: str, extra: str = "", space: str = SPACE, most: int = 6) -> Experiment:
    path = tmp_path / f"{exp_id}.yml"
    path.write_text(space + CONFIG.replace("maxTrialNumber: 6", f"maxTrialNumber: {most}") + extra)
    return Experiment(load_config(path), exp_id, tmp_path / "work")


def run_trial(store: ExperimentStore, exp: Experiment, index: int, value: float | None, status=TrialStatus.SUCCEEDED):
    asked = ask(store, exp.experiment_id, index, f"{exp.experiment_id}-{index}", exp.algorithm, exp.space)
    store.finish(asked.storage_id, status, value, None)
    return asked.parameters


def earlier(tmp_path: Path, store: ExperimentStore, dag_id: str = "dag_a", trials: int = 25) -> list[dict]:
    """An earlier experiment of ``dag_id`` with ``trials`` results (more than TPE's 20 random
    start-up trials, so a tuner that learns from them draws from its model at once)."""
    first = experiment(tmp_path, "e-earlier", most=30)
    start_run(first, store, dag_id, "r0", {})
    return [run_trial(store, first, i, float(i % 7)) for i in range(trials)]


def first_asks(store: ExperimentStore, exp: Experiment, n: int = 3) -> list[dict]:
    return [
        ask(store, exp.experiment_id, i, f"{exp.experiment_id}-{i}", exp.algorithm, exp.space).parameters
        for i in range(n)
    ]


def test_results_give_the_tuner_the_earlier_trials_and_change_its_first_asks(tmp_path, store):
    earlier(tmp_path, store)
    warm = experiment(tmp_path, "e-warm", "warmStart: {experiment: e-earlier, use: results}\n")
    started = start_run(warm, store, "dag_a", "r1", {})
    assert started.warm_start is not None and started.warm_start.learnt == 25
    # the tuner's history holds them (Optuna's study, as the sampler reads it) ...
    study = optuna.load_study(study_name="e-warm", storage=store.storage)
    priors = [t for t in study.trials if PRIOR_ATTR in t.user_attrs]
    assert len(priors) == 25 and all(t.state == optuna.trial.TrialState.COMPLETE for t in priors)
    assert sorted(t.value for t in priors) == sorted(float(i % 7) for i in range(25))
    # ... and nothing else sees them: no trials of this experiment, no best, no counts
    assert store.trial_rows("e-warm") == []
    summary = queries.experiment_summary(store.engine, "e-warm")
    assert summary["trials"] == 0 and summary["best"] is None
    # the same seed, cold: the first asks differ (TPE draws from what it learnt, not at random)
    cold = experiment(tmp_path, "e-cold")
    start_run(cold, store, "dag_a", "r2", {})
    warm_asks, cold_asks = first_asks(store, warm), first_asks(store, cold)
    assert warm_asks != cold_asks
    again = experiment(tmp_path, "e-cold2")  # and a cold start is reproducible: the difference is the history
    start_run(again, store, "dag_a", "r3", {})
    assert first_asks(store, again) == cold_asks
    # the asks of the warm experiment are its own trials, numbered from 0
    assert [r.trial_index for r in store.trial_rows("e-warm")] == [0, 1, 2]


def test_the_lineage_links_both_ways_and_the_pages_read_it(tmp_path, store):
    earlier(tmp_path, store, trials=3)
    warm = experiment(tmp_path, "e-warm", "warmStart: {experiment: e-earlier}\n")
    start_run(warm, store, "dag_a", "r1", {})
    assert store.experiment_attr("e-warm", WARM_STARTED_FROM)["experiment_id"] == "e-earlier"
    assert store.experiment_attr("e-earlier", WARM_STARTED_BY) == ["e-warm"]
    summary = queries.experiment_summary(store.engine, "e-warm")
    assert summary["warm_started_from"] == {
        "experiment_id": "e-earlier",
        "use": "results",
        "learnt": 3,
        "queued": 0,
        "dropped": 0,
    }
    assert queries.experiment_summary(store.engine, "e-earlier")["warm_started_by"] == ["e-warm"]


def test_a_retried_start_adds_nothing_twice(tmp_path, store):
    earlier(tmp_path, store, trials=4)
    warm = experiment(tmp_path, "e-warm", "warmStart: {experiment: e-earlier}\n")
    start_run(warm, store, "dag_a", "r1", {})
    again = start_run(warm, store, "dag_a", "r1", {})
    assert again.warm_start is not None and again.warm_start.reason == "already done"
    study = optuna.load_study(study_name="e-warm", storage=store.storage)
    assert len(study.trials) == 4
    assert store.experiment_attr("e-earlier", WARM_STARTED_BY) == ["e-warm"]


def test_a_start_that_died_half_way_adds_only_what_is_missing(tmp_path, store):
    earlier(tmp_path, store, trials=4)
    warm = experiment(tmp_path, "e-warm", "warmStart: {experiment: e-earlier}\n")
    real = store.add_prior_trials
    calls = []

    def dies_after_two(experiment_id, space, priors):
        calls.append(1)
        if len(calls) == 1:
            real(experiment_id, space, list(priors)[:2])
            raise RuntimeError("the worker died")
        return real(experiment_id, space, priors)

    store.add_prior_trials = dies_after_two
    with pytest.raises(RuntimeError):
        start_run(warm, store, "dag_a", "r1", {})
    assert store.experiment_attr("e-warm", WARM_STARTED_FROM) is None
    start_run(warm, store, "dag_a", "r1", {})  # the retry
    study = optuna.load_study(study_name="e-warm", storage=store.storage)
    keys = sorted(t.user_attrs[PRIOR_ATTR]["trial_id"] for t in study.trials)
    assert keys == [f"e-earlier-{i}" for i in range(4)]  # each once


def test_rerun_queues_the_best_sets_to_run_first(tmp_path, store):
    params = earlier(tmp_path, store, trials=8)
    warm = experiment(tmp_path, "e-rerun", "warmStart: {experiment: e-earlier, use: rerun, topK: 2}\n")
    started = start_run(warm, store, "dag_a", "r1", {})
    assert started.warm_start is not None and len(started.warm_start.queued) == 2
    best = [params[6], params[5]]  # 6.0, 5.0
    assert first_asks(store, warm, 2) == best
    asked_by = store.trial_attr(store.find_trial_id("e-rerun", 0), "asked_by")
    assert asked_by["by"] == "warm start"
    assert "trial e-earlier-6 of experiment e-earlier (6 there)" in asked_by["reason"]
    study = optuna.load_study(study_name="e-rerun", storage=store.storage)
    assert not [t for t in study.trials if PRIOR_ATTR in t.user_attrs]  # the numbers are not trusted


def test_sets_outside_this_space_are_named_not_given(tmp_path, store):
    earlier(tmp_path, store, trials=10)
    narrow = "searchSpace: {x: {_type: uniform, _value: [0, 1]}, k: {_type: choice, _value: [a, b]}}\n"
    warm = experiment(tmp_path, "e-narrow", "warmStart: {experiment: e-earlier}\n", space=narrow)
    started = start_run(warm, store, "dag_a", "r1", {})
    assert started.warm_start is not None
    assert started.warm_start.learnt + len(started.warm_start.dropped) == 10
    assert started.warm_start.dropped and all("x" in d for d in started.warm_start.dropped)


@pytest.mark.parametrize(
    ("dag_id", "source", "message"),
    [
        ("dag_b", "e-earlier", "belongs to another DAG, not dag_b"),
        ("dag_a", "e-missing", "no such experiment in the store"),
        ("dag_a", "e-self", "that is this experiment"),
    ],
)
def test_what_the_config_names_is_checked_before_anything_is_written(tmp_path, store, dag_id, source, message):
    earlier(tmp_path, store, trials=2)
    warm = experiment(tmp_path, "e-self", f"warmStart: {{experiment: {source}}}\n")
    with pytest.raises(WarmStartError, match=message):
        start_run(warm, store, dag_id, "r1", {})
    assert not store.experiment_exists("e-self")
    assert store.experiment_attr("e-earlier", WARM_STARTED_BY) is None


def test_other_objectives_are_no_history(tmp_path, store):
    earlier(tmp_path, store, trials=2)
    several = "objectives: [{metric: acc, mode: maximize}, {metric: loss, mode: minimize}]\n"
    warm = experiment(tmp_path, "e-two", "warmStart: {experiment: e-earlier}\n" + several)
    with pytest.raises(WarmStartError, match="measured one metric, this experiment measures the objectives acc, loss"):
        start_run(warm, store, "dag_a", "r1", {})


@pytest.mark.parametrize(
    ("extra", "key", "message"),
    [
        ("warmStart: {experiment: e1, topK: 2}\n", "topK", "only with use: rerun"),
        ("warmStart: {experiment: E_1}\n", "experiment", "should match pattern"),
        ("warmStart: {experiment: e1, use: guess}\n", "use", "'results' or 'rerun'"),
        ("scheduledRuns: retune\nwarmStart: {experiment: e1}\n", "warmStart", "choose one of the two"),
    ],
)
def test_the_key_is_checked_by_name(tmp_path, extra, key, message):
    path = tmp_path / "c.yml"
    path.write_text(SPACE + CONFIG + extra)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    text = str(caught.value)
    assert key in text and message in text and str(path) in text


@pytest.mark.parametrize(
    ("tuner", "use", "message"),
    [
        ("Random", "results", "Random draws without looking at results"),
        ("GridSearch", "rerun", "GridSearch runs its own points in order"),
        ("TPE", "results", None),
        ("Random", "rerun", None),
        ("Anneal", "results", None),
    ],
)
def test_a_tuner_that_cannot_use_it_is_named(tmp_path, tuner, use, message):
    path = tmp_path / "c.yml"
    space = "searchSpace: {k: {_type: choice, _value: [a, b]}}\n"
    path.write_text(
        space
        + CONFIG.replace("name: TPE, classArgs: {optimize_mode: maximize, seed: 7}", f"name: {tuner}")
        + f"warmStart: {{experiment: e1, use: {use}}}\n"
    )
    problems = [p.message for p in check_runnable(load_config(path)) if p.key_path[:1] == ("warmStart",)]
    if message is None:
        assert problems == []
    else:
        assert len(problems) == 1 and message in problems[0]


@pytest.mark.parametrize(
    "tuner",
    [
        "{name: Anneal, classArgs: {optimize_mode: maximize, seed: 7}}",
        "{name: Evolution, classArgs: {optimize_mode: maximize, seed: 7, population_size: 8}}",
        "{name: GP, classArgs: {optimize_mode: maximize, seed: 7}}",
    ],
)
def test_every_tuner_that_learns_asks_from_a_history_of_prior_trials(tmp_path, store, tuner):
    """The prior trials stand in each learning tuner's history (Optuna trials without trialflow's
    index): its asks go through and give points of the space."""
    earlier(tmp_path, store)
    config = CONFIG.replace("{name: TPE, classArgs: {optimize_mode: maximize, seed: 7}}", tuner)
    path = tmp_path / "warm.yml"
    path.write_text(SPACE + config + "warmStart: {experiment: e-earlier}\n")
    warm = Experiment(load_config(path), "e-warm", tmp_path / "work")
    assert start_run(warm, store, "dag_a", "r1", {}).warm_start.learnt == 25
    for point in first_asks(store, warm):
        assert 0 <= point["x"] <= 10 and point["k"] in ("a", "b")
    assert [r.trial_index for r in store.trial_rows("e-warm")] == [0, 1, 2]


def test_a_warm_start_says_what_it_does_to_tpes_random_start(tmp_path, store):
    """Issue 46, 10: from 10 results TPE (NNI's 20 random start-up trials) asks exactly what a
    cold start asks, value for value; the start step said "the tuner learnt from 10 results".
    Now it says the results count toward the start-up trials, and from when TPE models."""
    earlier(tmp_path, store, trials=10)
    warm = experiment(tmp_path, "e-warm", "warmStart: {experiment: e-earlier, use: results}\n")
    started = start_run(warm, store, "dag_a", "r1", {})
    assert started.warm_start is not None and started.warm_start.learnt == 10
    assert started.warm_start.reason == (
        "the tuner was given 10 results of experiment e-earlier as its history; TPE draws its first 20 "
        "trials at random (tpe_args.n_startup_jobs); the 10 earlier results count toward them, so it "
        "models from about trial 10 on, and its first 10 asks are a cold start's"
    )
    cold = experiment(tmp_path, "e-cold")
    start_run(cold, store, "dag_a", "r2", {})
    assert first_asks(store, warm) == first_asks(store, cold)  # what the sentence says, measured


def test_a_warm_start_past_the_random_start_says_so(tmp_path, store):
    earlier(tmp_path, store, trials=25)
    warm = experiment(tmp_path, "e-warm", "warmStart: {experiment: e-earlier, use: results}\n")
    started = start_run(warm, store, "dag_a", "r1", {})
    assert started.warm_start is not None
    assert started.warm_start.reason.endswith("the 25 earlier results cover them, so it models from its first trial")


@pytest.mark.parametrize(
    ("tuner", "said"),
    [
        ("{name: TPE}", "TPE draws its first 20 trials at random (tpe_args.n_startup_jobs)"),
        ("{name: TPE, classArgs: {tpe_args: {n_startup_jobs: 5}}}", "TPE draws its first 5 trials at random"),
        ("{name: GP}", "GP draws its first 10 trials at random (cold_start_num)"),
        ("{name: Anneal}", None),
    ],
)
def test_validate_says_what_a_warm_start_does_to_the_tuner(tmp_path, capsys, tuner, said):
    from trialflow.cli.commands import main

    path = tmp_path / "c.yml"
    path.write_text(
        SPACE
        + CONFIG.replace("tuner: {name: TPE, classArgs: {optimize_mode: maximize, seed: 7}}", f"tuner: {tuner}")
        + "warmStart: {experiment: e-earlier, use: results}\n"
    )
    assert main(["validate", str(path)]) == 0
    err = capsys.readouterr().err
    if said is None:
        assert "note: warmStart" not in err
    else:
        assert f"note: warmStart: {said}" in err and "the earlier results count toward them" in err

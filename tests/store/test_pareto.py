"""Several objectives: the Pareto set (checked against brute force), trials' values from their
final dicts, Optuna's multi-objective samplers through the store, and the end step's summary."""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import pytest

from tests.helpers.pareto import brute_force
from trialflow.config import load_config
from trialflow.config.errors import ConfigError
from trialflow.experiment import Experiment, check_runnable
from trialflow.platforms.base import TrialStatus
from trialflow.runs import start_run, summarize_run
from trialflow.seeding.retune import ranked
from trialflow.store.experiment_store import ExperimentStore, sqlite_url
from trialflow.store.pareto import dominates, fronts, pareto_set, with_values
from trialflow.store.results import TrialRow, objective_values
from trialflow.tuning.asker import ask

OBJECTIVES = [{"metric": "acc", "mode": "maximize"}, {"metric": "latency", "mode": "minimize"}]


@pytest.mark.parametrize("seed", range(30))
def test_the_pareto_set_agrees_with_brute_force(seed):
    rng = random.Random(seed)
    k = rng.choice([2, 3])
    modes = [rng.choice(["maximize", "minimize"]) for _ in range(k)]
    # few distinct values: ties and duplicates are common, as with rounded metrics
    points = [None if rng.random() < 0.1 else [rng.randint(0, 6) / 2 for _ in range(k)] for _ in range(60)]
    assert pareto_set(points, modes) == brute_force(points, modes)


def test_dominance_needs_one_strictly_better():
    modes = ["maximize", "minimize"]
    assert dominates([2, 1], [1, 1], modes) and not dominates([1, 1], [1, 1], modes)
    assert not dominates([2, 3], [1, 1], modes)  # better on one, worse on the other


@pytest.mark.parametrize(
    ("final", "message"),
    [
        (0.5, "must be a dict with acc, latency"),
        ({"acc": 0.5}, "no number 'latency'"),
        ({"acc": True, "latency": 1}, "no number 'acc'"),
        ({"acc": 0.5, "latency": float("nan")}, "'latency' is nan, not a finite number"),
        ({"acc": "high", "latency": 1}, "no number 'acc'"),
    ],
)
def test_a_final_result_without_every_objective_is_named(final, message):
    values, problem = objective_values(final, OBJECTIVES)
    assert values is None and message in problem


def test_fronts_rank_front_by_front():
    rows = with_values(
        [
            TrialRow(i, None, {}, "SUCCEEDED", None, None, {}, v, 0, None)
            for i, v in enumerate([[0.9, 5.0], [0.5, 1.0], [0.8, 6.0], [0.4, 2.0], [0.1, 9.0]])
        ],
        OBJECTIVES,
    )
    assert [r.trial_index for r in fronts(rows, OBJECTIVES)] == [0, 1, 2, 3, 4]


CONFIG = """\
searchSpace: {{x: {{_type: uniform, _value: [0, 1]}}, y: {{_type: uniform, _value: [0, 1]}}}}
trialCommand: python3 t.py
trialConcurrency: 2
maxTrialNumber: 24
tuner: {{name: {tuner}, classArgs: {{seed: 5{extra}}}}}
trainingService: {{platform: local}}
objectives:
  - {{metric: acc, mode: maximize}}
  - {{metric: latency, mode: minimize}}
"""


def run_two_objectives(tmp_path: Path, tuner: str = "TPE", extra: str = "") -> tuple[Experiment, ExperimentStore, list]:
    """24 trials of acc (maximize) against latency (minimize), which grows with acc; trial 5
    reports no latency."""
    path = tmp_path / "c.yml"
    path.write_text(CONFIG.format(tuner=tuner, extra=extra))
    experiment = Experiment(load_config(path), "emo", tmp_path / "w")
    store = ExperimentStore(sqlite_url(tmp_path / "s.db"))
    start_run(experiment, store, "dag", "r1", {})
    finals = []
    for i in range(24):
        asked = ask(store, "emo", i, f"emo-{i}", experiment.algorithm, experiment.space)
        x, y = asked.parameters["x"], asked.parameters["y"]
        final = {"acc": round(x, 3), "latency": round(x * x + y, 3)} if i != 5 else {"acc": 1.0}  # 5: no latency
        finals.append(final)
        store.finish(asked.storage_id, TrialStatus.SUCCEEDED, final, None)
    return experiment, store, finals


@pytest.mark.parametrize(("tuner", "extra"), [("TPE", ""), ("Evolution", ", population_size: 6"), ("Random", "")])
def test_two_conflicting_objectives_give_the_pareto_set_of_the_trials(tmp_path: Path, tuner, extra):
    experiment, store, finals = run_two_objectives(tmp_path, tuner, extra)
    verdict = summarize_run(experiment, store, "r1", {})
    points = [None if i == 5 else [f["acc"], f["latency"]] for i, f in enumerate(finals)]
    expected = brute_force(points, ["maximize", "minimize"])
    assert sorted(p["trial_index"] for p in verdict.summary["pareto"]) == expected
    assert verdict.summary["objectives"] == OBJECTIVES
    pareto = verdict.summary["pareto"]
    assert [p["values"]["acc"] for p in pareto] == sorted((p["values"]["acc"] for p in pareto), reverse=True)
    assert verdict.best is not None and verdict.best.values == pareto[0]["values"]
    assert verdict.summary["best"] is not None and verdict.summary["best"]["final_metric"] == pareto[0]["values"]
    assert verdict.failure is None
    five = next(t for t in verdict.summary["trials"] if t["trial_index"] == 5)
    assert five["values"] is None and "no number 'latency'" in five["message"]
    marked = [line for line in verdict.table.splitlines() if line.startswith("*")]
    assert len(marked) == len(expected) and "acc=" in marked[0]
    # a re-tuning experiment would take the front first
    front = {p["trial_index"] for p in pareto}
    distinct = {repr(sorted(p["parameters"].items())) for p in pareto}  # a repeated point comes over once
    top = ranked(store.trial_rows("emo"), "maximize", OBJECTIVES)[: len(distinct)]
    assert {r.trial_index for r in top} <= front


@pytest.mark.parametrize(
    ("change", "key", "message"),
    [
        ("tuner: {name: GP}", "tuner", "GP optimizes one metric; with several objectives use TPE, Random, Evolution"),
        (
            "tuner: {name: TPE}\nassessor: {name: Medianstop}",
            "assessor",
            "Medianstop stops trials by one metric's curve",
        ),
        ("advisor: {name: Hyperband}", "advisor", "Hyperband stops trials at rungs by one metric"),
    ],
)
def test_algorithms_that_serve_one_objective_are_refused(tmp_path: Path, change, key, message):
    path = tmp_path / "c.yml"
    text = CONFIG.format(tuner="TPE", extra="").replace("tuner: {name: TPE, classArgs: {seed: 5}}", change)
    path.write_text(text)
    problems = check_runnable(load_config(path))
    assert any(p.key_path[:1] == (key,) and message in p.message for p in problems), problems


def test_objectives_need_two_distinct_metrics(tmp_path: Path):
    path = tmp_path / "c.yml"
    base = CONFIG.format(tuner="TPE", extra="").split("objectives:")[0]
    for bad, message in (
        ("objectives: [{metric: acc, mode: maximize}]\n", "expected two or more objectives"),
        ("objectives: [{metric: a, mode: maximize}, {metric: a, mode: minimize}]\n", "a different metric"),
        (
            "objectives: [{metric: a, mode: up}, {metric: b, mode: minimize}]\n",
            r"objectives\[0\]\.mode: Input should be .maximize. or .minimize.",
        ),
    ):
        path.write_text(base + bad)
        with pytest.raises(ConfigError, match=message):
            load_config(path)


def test_every_pair_of_the_pareto_set_is_mutually_non_dominated():
    rng = random.Random(1)
    points = [[rng.random(), rng.random(), rng.random()] for _ in range(200)]
    modes = ["maximize", "minimize", "maximize"]
    front = pareto_set(points, modes)
    for i, j in itertools.permutations(front, 2):
        assert not dominates(points[i], points[j], modes)


@pytest.mark.slow
def test_the_pages_cli_and_export_show_the_same_pareto_set(tmp_path: Path):
    import csv
    import io
    import json
    import subprocess
    import sys

    from trialflow import queries

    experiment, store, finals = run_two_objectives(tmp_path)
    expected = brute_force(
        [None if i == 5 else [f["acc"], f["latency"]] for i, f in enumerate(finals)], ["maximize", "minimize"]
    )
    page = queries.trials_page(store.engine, "emo", limit=100)
    assert page["objectives"] == OBJECTIVES and sorted(page["pareto"]) == expected
    assert sorted(r["trial_index"] for r in page["rows"] if r["pareto"]) == expected
    assert page["rows"][2]["values"] == {"acc": finals[2]["acc"], "latency": finals[2]["latency"]}
    assert page["rows"][5]["values"] is None and not page["rows"][5]["pareto"]
    charted = queries.chart_data(store.engine, "emo").trials
    assert sorted(r["trial_index"] for r in charted if r["pareto"]) == expected
    sampled = queries.chart_data(store.engine, "emo", cap=2).trials  # a sample keeps the whole set
    assert sorted(r["trial_index"] for r in sampled if r["pareto"]) == expected
    summary = queries.experiment_summary(store.engine, "emo")
    assert sorted(r["trial_index"] for r in summary["pareto"]) == expected
    assert summary["best"]["trial_index"] == summary["pareto"][0]["trial_index"]
    accs = [r["values"]["acc"] for r in summary["pareto"]]
    assert accs == sorted(accs, reverse=True)  # by the first objective, best first
    exported = list(csv.DictReader(io.StringIO(queries.export_csv(store.engine, "emo"))))
    assert sorted(int(float(r["trial_index"])) for r in exported if r["pareto"] == "True") == expected
    assert float(exported[2]["objective:latency"]) == finals[2]["latency"]
    cli = [sys.executable, "-m", "trialflow.cli", "trials", "emo", "--store", store.url, "--limit", "100"]
    shown = subprocess.run(cli, capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert f"{len(expected)} in the Pareto set (*)" in shown.stdout
    assert "latency" in shown.stdout and "acc" in shown.stdout
    as_json = json.loads(subprocess.run([*cli, "--json"], capture_output=True, text=True, timeout=120).stdout)
    assert sorted(as_json["pareto"]) == expected
    one = queries.trials_page(store.engine, "emo", indexes=[0])
    assert set(one) >= {"objectives", "pareto"}  # a page of one still knows the whole set

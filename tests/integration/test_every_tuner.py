"""Every NNI 3.0 built-in tuner and advisor name runs six trials on the local platform under
the real scheduler: one DAG, a task group per name, side by side (issue 51's "no refusal left
but NAS-only ones"). Two waves of three, so each tuner asks again after results (PBT: two
generations of three); twelve trials in four waves took 172-318 s of the suite's time, and
tests/tuning/test_tuners.py draws fourteen of each tuner through the same sampler path."""

from __future__ import annotations

import json

import pytest

from tests.helpers.airflow import Harness
from trialflow.config.model import AlgorithmConfig
from trialflow.config.search_space import parse_search_space
from trialflow.platforms.base import experiment_id_for
from trialflow.tuning.algorithms import CATALOGUE, CLOSEST, check_algorithms

pytestmark = pytest.mark.integration

SPACE = {
    "x": {"_type": "uniform", "_value": [0, 1]},
    "lr": {"_type": "loguniform", "_value": [0.0001, 0.1]},
    "k": {"_type": "choice", "_value": [1, 2, 3]},
}
#: NNI 3.0's built-in tuners and advisors (its docs' list), by the names NNI's configs use.
NNI_NAMES = {
    "TPE": "tuner",
    "Random": "tuner",
    "Anneal": "tuner",
    "Evolution": "tuner",
    "SMAC": "tuner",
    "BatchTuner": "tuner",
    "GridSearch": "tuner",
    "Hyperband": "advisor",
    "Metis": "tuner",
    "BOHB": "advisor",
    "GP": "tuner",
    "PBT": "tuner",
    "DNGO": "tuner",
}
TRIALS = 6
MODELS = """\
def objective(params):
    if "combine_params" in params:
        params = params["combine_params"]
    return 1.0 - (params["x"] - 0.3) ** 2 - abs(params["k"] - 2) * 0.1
"""


def _group(name: str, kind: str) -> dict:
    space = SPACE
    if name == "BatchTuner":
        combos = [{"x": i / 6, "k": 1 + i % 3} for i in range(TRIALS)]
        space = {"combine_params": {"_type": "choice", "_value": combos}}
    elif name == "GridSearch":
        space = {
            "x": {"_type": "choice", "_value": [0.1, 0.3, 0.5, 0.7]},
            "k": {"_type": "choice", "_value": [1, 2, 3]},
        }
    args = {"optimize_mode": "maximize"} if name not in ("BatchTuner",) else {}
    if name == "PBT":
        args["population_size"] = 3
    if name in ("Hyperband",):
        args["R"] = 2
    return {
        "searchSpace": space,
        "trialFunction": "models:objective",
        "trialConcurrency": 3,
        "maxTrialNumber": TRIALS,
        kind: {"name": name, "classArgs": args},
        "trainingService": {"platform": "local"},
    }


def test_every_name_validates():
    names = {spec.name for spec in CATALOGUE if spec.role != "assessor"}
    assert set(NNI_NAMES) == names  # the catalogue holds every built-in name NNI 3.0 documents
    assert set(CLOSEST) == {"PPOTuner", "NetworkMorphism", "RegularizedEvolution"}  # NAS only
    for name, kind in NNI_NAMES.items():
        group = _group(name, kind)
        algorithm = AlgorithmConfig(name=name, class_args=group[kind]["classArgs"])
        tuner, advisor = (algorithm, None) if kind == "tuner" else (None, algorithm)
        assert check_algorithms(tuner, advisor, None, parse_search_space(group["searchSpace"])) == [], name


def test_every_built_in_name_runs_six_trials_on_the_local_platform(harness: Harness):
    folder = harness.root / "experiments" / "every_tuner"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "models.py").write_text(MODELS)
    groups = {
        name.lower(): {**_group(name, kind), "trialCodeDirectory": str(folder)} for name, kind in NNI_NAMES.items()
    }
    dag_id = "it_every_tuner"
    source = (
        "# an airflow DAG: every NNI tuner name side by side\nimport json\n"
        "from airflow.sdk import DAG\nfrom trialflow.task_group import ExperimentTaskGroup\n"
        f"GROUPS = json.loads({json.dumps(json.dumps(groups))})\n"
        f"with DAG({dag_id!r}, schedule=None) as dag:\n"
        "    for name, config in GROUPS.items():\n"
        "        ExperimentTaskGroup(name, config, poll_interval=0.3)\n"
    )
    dag_file = harness.airflow.dags_folder / "every_tuner.py"
    dag_file.write_text(source)
    harness.dag_files[dag_id] = dag_file
    run_id, state = harness.run(dag_id, timeout=900)
    results = {}
    for group in groups:
        rows = harness.store.trial_rows(experiment_id_for(dag_id, run_id, group))
        results[group] = [r.status for r in rows]
    assert state == "success", results
    for group, statuses in results.items():
        assert len(statuses) == TRIALS, (group, statuses)
        # the advisors stop trials at their rungs; every other trial succeeds
        assert all(s in ("SUCCEEDED", "EARLY_STOPPED") for s in statuses), (group, statuses)
        assert statuses.count("SUCCEEDED") >= 1, (group, statuses)

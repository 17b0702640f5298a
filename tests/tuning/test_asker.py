"""The asker drives the tuner and the assessor; the store persists. Held apart on purpose
(issue 48): a change that makes the store sample, or the asker write rows, fails here first."""

from __future__ import annotations

import ast
from pathlib import Path

from trialflow.platforms.base import TrialStatus
from trialflow.trial.protocol import Metric
from trialflow.tuning.asker import ask, judge, should_stop
from trialflow.tuning.assessors import make_pruner

TUNING = Path(__file__).resolve().parents[2] / "trialflow" / "tuning"
#: What samples: the tuners, their catalogue, the history window a sampler reads, Optuna's samplers.
SAMPLING = ("trialflow.tuning.tuners", "trialflow.tuning.algorithms", "trialflow.tuning.history", "optuna.samplers")


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def test_the_store_imports_nothing_that_samples():
    for module in ("experiment_store.py", "optuna_storage.py"):
        imported = _imports(TUNING / module)
        assert not {n for n in imported if n.startswith(SAMPLING)}, (module, imported)


def test_the_asker_writes_no_rows_itself():
    imported = _imports(TUNING / "asker.py")
    assert not {n for n in imported if n.startswith("sqlalchemy")}, imported
    text = (TUNING / "asker.py").read_text()
    assert ".transaction(" not in text and "write_user_attrs" not in text


def test_a_second_ask_for_an_index_gets_the_first_ones_parameters(store):
    from trialflow.config.model import AlgorithmConfig
    from trialflow.config.search_space import parse_search_space

    tpe = AlgorithmConfig(name="TPE")
    space = parse_search_space({"x": {"_type": "uniform", "_value": [0, 1]}})
    store.open_experiment("easker1")
    first = ask(store, "easker1", 0, "easker1-0000", tpe, space)
    again = ask(store, "easker1", 0, "easker1-0000", tpe, space)
    assert not first.resumed and again.resumed
    assert (again.storage_id, again.parameters) == (first.storage_id, first.parameters)


def test_the_assessor_is_not_asked_about_a_finished_trial(store, tmp_path):
    from trialflow.config import load_config
    from trialflow.config.model import AlgorithmConfig
    from trialflow.config.search_space import parse_search_space

    config_path = tmp_path / "c.yml"
    config_path.write_text(
        "searchSpace: {x: {_type: uniform, _value: [0, 1]}}\ntrialCommand: 'true'\ntrialConcurrency: 1\n"
        "trainingService: {platform: local}\ntuner: {name: TPE}\nassessor: {name: Medianstop}\n"
    )
    pruner = make_pruner(load_config(config_path))
    assert pruner is not None
    space = parse_search_space({"x": {"_type": "uniform", "_value": [0, 1]}})
    store.open_experiment("easker2")
    asked = ask(store, "easker2", 0, "easker2-0000", AlgorithmConfig(name="TPE"), space)
    store.record_metrics(asked.storage_id, [Metric("PERIODICAL", s, 0.1) for s in range(3)])
    store.finish(asked.storage_id, TrialStatus.SUCCEEDED, 0.1)
    judged = judge(store, "easker2", asked.storage_id, pruner, after=1)
    assert judged.stop_at is None and judged.judged_through == 1
    assert not should_stop(store, "easker2", asked.storage_id, pruner)

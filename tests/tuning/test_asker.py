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
STORE = TUNING.with_name("store")
#: What samples: every tuner room (tuners, their catalogue, the history window a sampler reads,
#: PBT the algorithm, custom classes) and Optuna's samplers.
SAMPLING = ("trialflow.tuning", "optuna.samplers")


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def test_the_store_imports_nothing_that_samples():
    """trialflow/store sits under the tuners (issue 65; import-linter's layers say so too)."""
    modules = sorted(STORE.rglob("*.py"))
    assert len(modules) > 15, modules
    for module in modules:
        imported = _imports(module)
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


def _pbt(population: int = 4, **args):
    from trialflow.config.model import AlgorithmConfig

    return AlgorithmConfig(name="PBTTuner", class_args={"population_size": population, "seed": 11, **args})


def _close(store, asked, status, final=None):
    from trialflow.trial.protocol import Metric

    if final is not None:
        store.record_metrics(asked.storage_id, [Metric("FINAL", 0, final)])
    store.close(asked.storage_id, status, None)


def test_a_pbt_trial_waits_for_every_trial_of_the_generation_before(store):
    import pytest

    from trialflow.config.search_space import parse_search_space
    from trialflow.tuning.pbt import PopulationNotReady

    space = parse_search_space({"x": {"_type": "uniform", "_value": [0, 1]}})
    store.open_experiment("epbt1")
    firsts = [ask(store, "epbt1", i, f"epbt1-{i}", _pbt(), space, population_floor=0) for i in range(4)]
    assert [a.record.lineage.generation for a in firsts] == [0, 0, 0, 0]
    assert all(a.record.lineage.parent_index is None for a in firsts)
    for i, value in enumerate([0.4, 0.9, 0.1]):
        _close(store, firsts[i], TrialStatus.SUCCEEDED, value)
    with pytest.raises(
        PopulationNotReady, match=r"trial 4 \(generation 1\) waits for generation 0 to end \(trial indices 3\)"
    ):
        ask(store, "epbt1", 4, "epbt1-4", _pbt(), space, population_floor=0)
    assert store.find_trial("epbt1", 4) is None  # nothing asked, nothing claimed
    _close(store, firsts[3], TrialStatus.FAILED)  # a failed member ranks last
    no_resample = _pbt(resample_probability=0.0)
    children = [ask(store, "epbt1", i, f"epbt1-{i}", no_resample, space, population_floor=0) for i in range(4, 8)]
    lineages = [c.record.lineage for c in children]
    assert [(g.generation, g.member) for g in lineages] == [(1, 0), (1, 1), (1, 2), (1, 3)]
    # cutoff ceil(0.2 * 4) = 1: the worst (3, failed) copies the best (1); the rest go on
    assert [(g.parent_index, g.exploited) for g in lineages] == [(0, False), (1, False), (2, False), (1, True)]
    assert children[0].parameters == firsts[0].parameters
    assert children[3].parameters != firsts[1].parameters
    moved = children[3].parameters["x"] - firsts[1].parameters["x"]
    assert abs(moved) == pytest.approx(0.2) or children[3].parameters["x"] in (0.0, 1.0)  # +-factor, held to [0, 1]


def test_an_index_below_the_runs_floor_is_not_waited_for_and_an_import_never_waits(store):
    from trialflow.config.search_space import parse_search_space

    space = parse_search_space({"x": {"_type": "uniform", "_value": [0, 1]}})
    store.open_experiment("epbt2")
    ran = ask(store, "epbt2", 0, "epbt2-0", _pbt(2), space, population_floor=0)
    _close(store, ran, TrialStatus.SUCCEEDED, 0.5)
    # index 1 never ran (its run ended); a later run starting at index 2 plans from index 0 alone
    child = ask(store, "epbt2", 3, "epbt2-3", _pbt(2), space, population_floor=2)
    assert (child.record.lineage.parent_index, child.record.lineage.exploited) == (0, True)
    store.open_experiment("epbt3")
    imported = ask(store, "epbt3", 5, "epbt3-5", _pbt(2), space)  # no floor: no population wait
    assert imported.record.lineage is None

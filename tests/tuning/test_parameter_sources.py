"""Where a new trial's parameters come from (trialflow.tuning.parameter_sources), one kind of tuner
per source, without a store: which source a tuner gets, PBT's wait and plan from the generation
before it is handed, a person's queued values passing through, the sampler seeded per index."""

from __future__ import annotations

import optuna
import pytest

from trialflow.config.model import AlgorithmConfig
from trialflow.config.search_space import encode, parse_search_space
from trialflow.store.experiment_store import TrialRecord
from trialflow.trial.status import TrialStatus
from trialflow.tuning.parameter_sources import (
    CustomSource,
    NewTrial,
    PopulationSource,
    SamplerSource,
    replaying,
    source_for,
)
from trialflow.tuning.pbt import PopulationNotReady

SPACE = parse_search_space({"x": {"_type": "uniform", "_value": [0, 1]}})
PBT = AlgorithmConfig(name="PBTTuner", class_args={"population_size": 2, "seed": 3, "fraction": 0.5})


def _ended(index: int, x: float, final: float | None, status=TrialStatus.SUCCEEDED) -> TrialRecord:
    return TrialRecord(index + 10, index, index, f"t{index}", {"x": x}, status=status, finished=True, final=final)


def _source(tuner, index=0, generation=None, floor=0, unasked=frozenset()):
    new = NewTrial("e", index, f"t{index}", tuner, SPACE, floor, 0, unasked, generation)
    return source_for(None, new)  # type: ignore[arg-type]


def _drawn(source) -> dict:
    study = optuna.create_study(sampler=replaying(source.sampler(), source.fixed(None)))
    return source.parameters(study.ask())


def test_each_kind_of_tuner_gets_its_source():
    assert type(_source(AlgorithmConfig(name="TPE"))) is SamplerSource
    assert type(_source(PBT, generation={})) is PopulationSource
    assert type(_source(PBT, floor=None)) is SamplerSource  # an import brings its parameters: no population
    custom = AlgorithmConfig(code_directory=".", class_name="my_tuner.MyTuner")
    assert type(_source(custom)) is CustomSource and _source(custom).name == "my_tuner.MyTuner"
    with pytest.raises(ValueError, match="needs its generation before"):
        _source(PBT)  # a PBT ask whose caller read no generation is a mistake, not "none ran"


def test_a_sampler_draws_the_same_for_the_same_index_and_passes_a_persons_values_through():
    tpe = AlgorithmConfig(name="Random", class_args={"seed": 5})
    assert _drawn(_source(tpe, 4)) == _drawn(_source(tpe, 4)) != _drawn(_source(tpe, 5))
    queued = encode(SPACE, {"x": 0.25})
    source = _source(tpe, 4)
    assert source.fixed(queued) == queued and source.lineage() is None
    study = optuna.create_study(sampler=replaying(source.sampler(), source.fixed(queued)))
    assert source.parameters(study.ask()) == {"x": 0.25}


def test_a_pbt_member_waits_for_its_generation_then_runs_its_plan():
    running = TrialRecord(11, 1, 1, "t1", {"x": 0.9})
    waiting = _source(PBT, 2, generation={0: _ended(0, 0.2, 0.1), 1: running})
    with pytest.raises(PopulationNotReady, match=r"trial indices 1\)"):
        waiting.ready()
    never = _source(PBT, 2, generation={0: _ended(0, 0.2, 0.1), 1: None}, floor=0)
    with pytest.raises(PopulationNotReady):
        never.ready()  # not asked yet, at or above the run's floor: it will be
    below = _source(PBT, 2, generation={0: _ended(0, 0.2, 0.1), 1: None}, floor=2)
    below.ready()  # below the floor: its run ended, it never will be
    source = _source(PBT, 2, generation={0: _ended(0, 0.2, 0.1), 1: _ended(1, 0.9, 0.8)})
    source.ready()
    # cutoff ceil(0.5 * 2) = 1: member 0 ranked last copies the best (trial 1), perturbed
    fixed = source.fixed(None)
    lineage = source.lineage()
    assert lineage is not None and (lineage.generation, lineage.member, lineage.parent_index) == (1, 0, 1)
    assert lineage.exploited and fixed is not None
    study = optuna.create_study(sampler=replaying(source.sampler(), fixed))
    assert source.parameters(study.ask())["x"] == pytest.approx(fixed["x"])
    queued = _source(PBT, 3, generation={0: _ended(0, 0.2, 0.1), 1: _ended(1, 0.9, 0.8)})
    queued.ready()
    mine = encode(SPACE, {"x": 0.5})
    assert queued.fixed(mine) == mine  # a person's trial runs their values, in the member's place
    assert queued.lineage() is not None and queued.lineage().parent_index is None


def test_a_failed_member_ranks_last_and_a_first_generation_member_is_fresh():
    first = _source(PBT, 1, generation={})
    first.ready()
    assert first.fixed(None) is None and first.lineage().generation == 0  # the sampler draws
    failed = _source(PBT, 3, generation={0: _ended(0, 0.2, 0.1), 1: _ended(1, 0.9, None, TrialStatus.FAILED)})
    failed.ready()
    failed.fixed(None)
    assert failed.lineage().parent_index == 0 and failed.lineage().exploited  # trial 1 failed: it copies 0

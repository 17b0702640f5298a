"""Where a new trial's parameters come from, one kind of tuner per class: Optuna's sampler (every
built-in tuner and Optuna's own classes), Population Based Training's member plan, the user's own
tuner or advisor class.

The asker (trialflow.tuning.asker) drives all three the same way, as Optuna's Study drives any
sampler: :meth:`ParameterSource.ready` before a person's queued trial is claimed for the index
(PBT refuses while its generation before still runs), :meth:`ParameterSource.fixed` with what a
person queued (the values the sampler then replays), :meth:`ParameterSource.sampler` and
:meth:`ParameterSource.parameters` for the trial Optuna made. What a kind of tuner needs of the
experiment (PBT's generation before, a custom class's store) it is given when it is made; none
of them claims or writes a trial (the store does, in the asker's one transaction).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import optuna

from trialflow.config.search_space import SearchSpace, encode
from trialflow.store.records import Lineage
from trialflow.tuning.algorithms import canonical_tuner_name
from trialflow.tuning.custom.runner import CustomClass, generate
from trialflow.tuning.pbt import Ended, PbtArgs, generation_before, generation_of, plan_member
from trialflow.tuning.tuners import make_sampler, sample_parameters

if TYPE_CHECKING:
    from trialflow.config.model import AlgorithmConfig
    from trialflow.store.experiment_store import ExperimentStore, TrialRecord


class ParameterSource(Protocol):
    """A new trial's parameters, from one kind of tuner (see module)."""

    #: The tuner's canonical name (what the asker's reading window is chosen by).
    name: str

    def ready(self) -> None:
        """Raise when the trial may not be given parameters yet (PopulationNotReady)."""

    def fixed(self, queued: dict[str, Any] | None) -> dict[str, Any] | None:
        """The values (Optuna's, encoded) the trial's sampler replays: a person's queued ones,
        or the tuner's own where it chooses outside Optuna; None: the sampler draws."""

    def lineage(self) -> Lineage | None:
        """What the trial descends from (PBT), known once :meth:`fixed` ran."""

    def sampler(self) -> optuna.samplers.BaseSampler:
        """The trial's sampler (seeded for its index), before a queued trial's values are laid over it."""

    def parameters(self, trial: optuna.Trial) -> dict[str, Any]:
        """The trial's parameters in NNI's shape, recorded on Optuna's ``trial`` too."""


@dataclass
class SamplerSource:
    """A built-in tuner or an Optuna class: Optuna's sampler draws (trialflow.tuning.tuners)."""

    tuner: AlgorithmConfig
    space: SearchSpace
    trial_index: int
    name: str = ""

    def __post_init__(self) -> None:
        self.name = canonical_tuner_name(self.tuner)

    def ready(self) -> None:
        return None

    def fixed(self, queued: dict[str, Any] | None) -> dict[str, Any] | None:
        return queued

    def lineage(self) -> Lineage | None:
        return None

    def sampler(self) -> optuna.samplers.BaseSampler:
        return make_sampler(self.tuner, self.space, self.trial_index)

    def parameters(self, trial: optuna.Trial) -> dict[str, Any]:
        return sample_parameters(self.tuner, self.space, trial, self.trial_index)


@dataclass
class PopulationSource(SamplerSource):
    """Population Based Training (trialflow.tuning.pbt): a trial of a later generation waits
    until every trial of the generation before has ended (``generation``: those trials by
    index, None where one was never asked; ``floor``: the first index of the asking run;
    ``unasked``: indexes whose task ended without asking), then runs its member's plan."""

    generation: Mapping[int, TrialRecord | None] = field(default_factory=dict)
    floor: int = 0
    unasked: frozenset[int] = frozenset()
    _ended: list[Ended] = field(default_factory=list, init=False, repr=False)
    _lineage: Lineage | None = field(default=None, init=False, repr=False)

    def ready(self) -> None:
        size = PbtArgs.from_class_args(self.tuner.class_args).population_size
        self._ended = generation_before(self.generation, self.trial_index, size, self.floor, self.unasked)

    def fixed(self, queued: dict[str, Any] | None) -> dict[str, Any] | None:
        args = PbtArgs.from_class_args(self.tuner.class_args)
        plan = plan_member(self.trial_index, args, self.space, self._ended) if queued is None else None
        if plan is None:  # a person's own trial, or a fresh member: its place in the population
            self._lineage = Lineage(*generation_of(self.trial_index, args.population_size))
            return queued
        self._lineage = plan.lineage
        return encode(self.space, plan.parameters)

    def lineage(self) -> Lineage | None:
        return self._lineage


@dataclass
class CustomSource:
    """The user's own tuner class, or an advisor kept as the tuner (trialflow.tuning.custom):
    its ``generate_parameters`` answers (AdvisorWaits when an advisor sent none yet), replayed
    as Optuna's values so Optuna records them."""

    tuner: AlgorithmConfig
    space: SearchSpace
    trial_index: int
    store: ExperimentStore
    experiment_id: str
    trial_id: str
    space_version: int
    name: str = ""
    _chosen: dict[str, Any] | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.name = str(self.tuner.class_name)

    def ready(self) -> None:
        return None

    def fixed(self, queued: dict[str, Any] | None) -> dict[str, Any] | None:
        if queued is not None:  # a person's own trial: the class is not asked
            return queued
        custom = CustomClass.of(self.tuner, "tuner")
        view = self.store.view(self.experiment_id)
        self._chosen = generate(view, self.trial_index, custom, self.space, self.trial_id, self.space_version)
        # an empty space (NNI's ga_squad: the class's own graph) has no values to replay
        return encode(self.space, self._chosen) if self.space.params else None

    def lineage(self) -> Lineage | None:
        return None

    def sampler(self) -> optuna.samplers.BaseSampler:
        return optuna.samplers.RandomSampler()

    def parameters(self, trial: optuna.Trial) -> dict[str, Any]:
        if self._chosen is None:  # a queued trial's values, replayed
            return sample_parameters(self.tuner, self.space, trial, self.trial_index)
        self.space.sample(trial)  # the class's values, recorded as Optuna's too (the dashboard, the charts)
        return self._chosen


@dataclass(frozen=True)
class NewTrial:
    """What an ask for a new trial's parameters is given (trialflow.tuning.asker.ask_new): the
    trial, its experiment's tuner and search space, and for Population Based Training the
    asking run's first index (``population_floor``; an import, which has none, gives every
    trial the parameters it brings), the indexes whose task ended unasked, and the generation
    before the trial (its trials by index, None where one was never asked), read by the caller."""

    experiment_id: str
    trial_index: int
    trial_id: str
    tuner: AlgorithmConfig
    space: SearchSpace
    population_floor: int | None = None
    space_version: int = 0
    unasked: frozenset[int] = frozenset()
    generation: Mapping[int, TrialRecord | None] | None = None

    @property
    def population_based(self) -> bool:
        """Whether PBT plans this trial (not an import)."""
        return self.population_floor is not None and self.tuner.population_based


def source_for(store: ExperimentStore, new: NewTrial) -> ParameterSource:
    """The source for the new trial's tuner."""
    tuner, space, index = new.tuner, new.space, new.trial_index
    if tuner.class_name is not None:
        return CustomSource(tuner, space, index, store, new.experiment_id, new.trial_id, new.space_version)
    if new.population_based:
        if new.generation is None:
            raise ValueError(f"trial {index}: Population Based Training's ask needs its generation before")
        floor = new.population_floor or 0
        return PopulationSource(tuner, space, index, generation=new.generation, floor=floor, unasked=new.unasked)
    return SamplerSource(tuner, space, index)


def replaying(sampler: optuna.samplers.BaseSampler, fixed: dict[str, Any] | None) -> optuna.samplers.BaseSampler:
    """``sampler`` with ``fixed`` values laid over it: the tuner learns from a person's trial
    (or a plan) like from any other."""
    if fixed is None:
        return sampler
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.PartialFixedSampler(fixed, sampler)

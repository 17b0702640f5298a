"""What a trial's start reads of its experiment, read once. No Airflow.

A trial start used to read its experiment feature by feature: the run's window, then the
maxTrialNumber a person changed, then the newest search space, then whether the trial had been
asked already (a retry), each a query of its own. :class:`StartState` is those in one store call
(``ExperimentStore.read_for_start``), typed: what admission and the asker decide from. What a
seam of the start needs read (tracking's attributes: ``StartTracking.reads``) comes in the same
call, and so do Population Based Training's generation before the trial (what it waits for
and learns from) and, in NNI's hybrid mode, the trials running now (where it is placed). A
custom class's kept state is still read where it is used (in its turn).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trialflow.experiment import LIMITS_ATTR
from trialflow.experiment.run_windows import RunWindow, key_of
from trialflow.tuning.pbt import UNASKED_ATTR, PbtArgs, previous_generation, unasked_of
from trialflow.tuning.space_versions import SPACES_ATTR, current_of

if TYPE_CHECKING:
    from trialflow.config.search_space import SearchSpace
    from trialflow.experiment import Experiment
    from trialflow.store.experiment_store import ExperimentStore, TrialRecord


@dataclass(frozen=True)
class StartState:
    """Trial ``trial_index`` of run ``run_id``'s experiment, as its start finds it."""

    run_id: str
    map_index: int
    #: What the run owns (its trial indexes, deadline, stop mark, inputs).
    window: RunWindow
    #: maxTrialNumber as a person changed it while the experiment ran (None: unchanged).
    max_trial_number: int | None
    #: The search space an ask samples from now (0: the config's), parsed under its names.
    space_version: int
    space: SearchSpace
    #: The trial already at this index (a retry, a resumed run), None when it was never asked.
    existing: TrialRecord | None
    #: Trial indexes whose task ended without asking (PBT waits for none of them).
    unasked: frozenset[int]
    #: Every attribute the start read, by key (what its seams asked for included).
    attrs: Mapping[str, Any] = field(default_factory=dict)
    #: Population Based Training: the generation before the trial's, by index, None where a
    #: member was never asked; None for any other tuner (and a trial asked already).
    generation: Mapping[int, TrialRecord | None] | None = None
    #: NNI's hybrid mode (several platforms): the trials running now, which the trial is placed
    #: among (Experiment.choose_service); None with one platform.
    active: tuple[TrialRecord, ...] | None = None

    @property
    def trial_index(self) -> int:
        return self.window.first_index + self.map_index


def read_start(
    experiment: Experiment, store: ExperimentStore, run_id: str, map_index: int, also: Iterable[str] = ()
) -> StartState:
    """The state trial ``map_index`` of run ``run_id`` starts from, in one store call, with the
    experiment attributes named in ``also`` (in ``StartState.attrs``)."""
    window_key = key_of(run_id)
    size = _population_size(experiment)

    def index_of(attrs: dict[str, Any]) -> int:
        return RunWindow.parse(attrs.get(window_key)).first_index + int(map_index)

    def indexes(attrs: dict[str, Any]) -> list[int]:
        index = index_of(attrs)
        return [index, *(previous_generation(index, size) if size else ())]

    keys = (window_key, LIMITS_ATTR, SPACES_ATTR, UNASKED_ATTR, *also)
    hybrid = len(experiment.config.training_service) > 1
    read = store.read_for_start(experiment.experiment_id, keys, indexes, active=hybrid)
    index = index_of(read.attrs)
    existing = read.trials.get(index)
    before = previous_generation(index, size) if size and existing is None else None
    generation = {i: read.trials.get(i) for i in before} if before is not None else None
    active = tuple(read.active) if read.active is not None else None
    return state_of(experiment, run_id, map_index, read.attrs, existing, generation, active)


def _population_size(experiment: Experiment) -> int | None:
    """The population of a Population Based Training tuner, None for any other."""
    tuner = experiment.algorithm
    return PbtArgs.from_class_args(tuner.class_args).population_size if tuner.population_based else None


def state_of(
    experiment: Experiment,
    run_id: str,
    map_index: int,
    attrs: dict[str, Any],
    existing: TrialRecord | None,
    generation: Mapping[int, TrialRecord | None] | None = None,
    active: tuple[TrialRecord, ...] | None = None,
) -> StartState:
    """The typed state from what the store returned (pure)."""
    window = RunWindow.parse(attrs.get(key_of(run_id)))
    limits = attrs.get(LIMITS_ATTR)
    changed = limits.get("maxTrialNumber") if isinstance(limits, dict) else None
    version, space = current_of(attrs.get(SPACES_ATTR), experiment.space.raw)
    return StartState(
        run_id,
        int(map_index),
        window,
        None if changed is None else int(changed),
        version,
        space if version else experiment.space,
        existing,
        unasked_of(attrs.get(UNASKED_ATTR)),
        attrs,
        generation,
        active,
    )

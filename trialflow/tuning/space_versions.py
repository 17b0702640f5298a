"""A search space changed while the experiment runs (NNI's ``nnictl update searchspace``):
its versions, the one an ask samples from, and what the tuner sees of the trials before it.

Versions live in the experiment attribute ``search_spaces`` (a list, appended atomically by
trialflow.steering.space_changes); version 0 is the config's and is not stored. An ask samples
from the newest version, and the trial records which (``space_version``).

Version N > 0 samples under sampler names of its own (``vN:`` before each name): Optuna keeps a
parameter's distribution for ever (a choice's options cannot change under one name), and a
trial of an earlier space must not reach the tuner as if it had been drawn from this one.
What the tuner reads (:class:`SpaceView`) is every trial of the newest version, and each
finished trial of an earlier one **whose parameters are a point of the new space**, re-encoded
under the new names and distributions; the others are left out of its history (they stay in
the store, the pages and the charts, marked by their version). This is NNI's
``update_search_space`` with NNI's rule for what a tuner keeps made explicit.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import FrozenTrial, TrialState

from trialflow.config.search_space import SearchSpace, SearchSpaceError, encode, parse_search_space

if TYPE_CHECKING:
    from trialflow.store.experiment_store import ExperimentStore

SPACES_ATTR = "search_spaces"
#: The trial attribute naming the version a trial was asked under (absent: version 0).
VERSION_ATTR = "space_version"


@dataclass(frozen=True)
class SpaceVersion:
    version: int
    space: dict[str, Any]
    at: float | None
    by: str | None

    def to_attr(self) -> dict[str, Any]:
        return {"version": self.version, "space": self.space, "at": self.at, "by": self.by}


def namespace(version: int) -> str:
    return f"v{version}:" if version > 0 else ""


def changes(raw: Any) -> list[SpaceVersion]:
    """The versions a person made, from the stored attribute (entries that are not one skipped)."""
    found = []
    for entry in raw if isinstance(raw, list) else []:
        if isinstance(entry, dict) and isinstance(entry.get("space"), dict) and isinstance(entry.get("version"), int):
            found.append(SpaceVersion(entry["version"], entry["space"], entry.get("at"), entry.get("by")))
    return found


def newest(raw: Any) -> int:
    """The newest version number the stored attribute holds: 0 (the config's) when none."""
    return max((v.version for v in changes(raw)), default=0)


def versions(store: ExperimentStore, experiment_id: str, config_space: dict[str, Any]) -> list[SpaceVersion]:
    """Every version, the config's first."""
    return [SpaceVersion(0, config_space, None, None), *changes(store.experiment_attr(experiment_id, SPACES_ATTR))]


def current(store: ExperimentStore, experiment_id: str, config_space: dict[str, Any]) -> tuple[int, SearchSpace]:
    """The version an ask samples from now, parsed under its own names."""
    return current_of(store.experiment_attr(experiment_id, SPACES_ATTR), config_space)


def current_of(raw: Any, config_space: dict[str, Any]) -> tuple[int, SearchSpace]:
    """The same, from the stored attribute (``raw``, None when no person changed the space)."""
    newest = [SpaceVersion(0, config_space, None, None), *changes(raw)][-1]
    return newest.version, parse_search_space(newest.space, namespace(newest.version))


class _Recorder:
    """A trial that replays fixed sampler values and records each one's distribution."""

    def __init__(self, fixed: dict[str, Any]):
        self.fixed = fixed
        self.distributions: dict[str, BaseDistribution] = {}

    def suggest_categorical(self, name: str, choices: Any) -> Any:
        self.distributions[name] = CategoricalDistribution(list(choices))
        return self.fixed[name]

    def suggest_int(self, name: str, low: int, high: int) -> int:
        self.distributions[name] = IntDistribution(low, high)
        return int(self.fixed[name])

    def suggest_float(self, name: str, low: float, high: float, *, log: bool = False) -> float:
        self.distributions[name] = FloatDistribution(low, high, log=log)
        return float(self.fixed[name])


def fitted(trial: FrozenTrial, space: SearchSpace, version: int) -> FrozenTrial | None:
    """``trial`` as the tuner of ``version`` sees it: as it is when asked under that version,
    re-encoded when it is a finished trial of an earlier one whose parameters fit, else None."""
    if int(trial.user_attrs.get(VERSION_ATTR, 0) or 0) == version:
        return trial
    if not trial.state.is_finished():  # being asked now (no attributes yet), or running
        mine = namespace(version)
        return trial if all(name.startswith(mine) for name in trial.params) else None
    parameters = trial.user_attrs.get("parameters")
    if trial.state == TrialState.FAIL or not isinstance(parameters, dict):
        return None
    try:
        fixed = encode(space, parameters)
    except SearchSpaceError:
        return None  # outside the new space: kept in the history, not given to the tuner
    recorder = _Recorder(fixed)
    space.sample(recorder)
    view = copy.copy(trial)
    view.params = {name: fixed[name] for name in recorder.distributions}
    view.distributions = recorder.distributions
    return view


class SpaceView:
    """The asking storage as the tuner of a changed space reads it (see module): everything is
    the storage's, but its trial lists, which hold only what fits."""

    def __init__(self, inner: Any, space: SearchSpace, version: int):
        self._inner, self._space, self._version = inner, space, version

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def get_all_trials(self, study_id: int, deepcopy: bool = True, states: Any = None) -> list[FrozenTrial]:
        trials = self._inner.get_all_trials(study_id, deepcopy=deepcopy, states=states)
        return [view for t in trials if (view := fitted(t, self._space, self._version)) is not None]

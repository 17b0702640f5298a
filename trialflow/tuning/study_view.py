"""What a tuner may read and keep of its experiment for one call: a view, never the store.

Optuna hands a sampler the Study, not the storage behind it; trialflow's tuners that keep
something of their own between asks (a user's tuner, assessor or advisor:
trialflow.tuning.custom.runner) are handed a :class:`StudyView` of their experiment the same
way: the attributes they keep their state and their lease in, changed by compare-and-set, and
the trials' histories. The store makes one per experiment (its ``view``); the tuner cannot reach
another experiment, a trial's status or the store's tables through it. Population Based
Training's view is the generation before its trial, read with the trial's start
(trialflow.tuning.parameter_sources.PopulationSource).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from trialflow.store.records import TrialHistory


class StudyView(Protocol):
    """One experiment, as a tuner's call may see and change it."""

    @property
    def experiment_id(self) -> str: ...

    def attr(self, key: str) -> Any:
        """The experiment attribute ``key`` (None when unset)."""
        ...

    def change_attr(self, key: str, change: Callable[[Any], Any]) -> Any:
        """Set attribute ``key`` to ``change(its current value)`` atomically (a compare-and-set,
        tried again when another writer came between) and return what is stored now."""
        ...

    def histories(self) -> list[TrialHistory]:
        """Every trial of the experiment with its curve and times (a warm start's priors too)."""
        ...

"""The shapes the store keeps beside a trial, read one way by the store's records, the rooms
that write them and the pages: a trial's restarts after faults (its ``restarts`` attribute,
written by trialflow.experiment.keeping) and its place in a Population Based Training population
(its ``pbt`` attribute, planned by trialflow.tuning.pbt), and a trial as its readers take it
(TrialRecord; TrialHistory, with its curve and times). The store imports no tuner, so the
shapes live here, under both; a tuner reads them without reaching the store."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trialflow.trial.handle import TrialHandle
from trialflow.trial.status import TrialStatus


@dataclass(frozen=True)
class Restart:
    """One restart of a trial after its job ended by a fault: the attempt it began (1 for the
    first restart), the checkpoint step it started from (None: from scratch, none was kept),
    when, and what ended the attempt before it."""

    attempt: int
    step: int | None
    at: float
    reason: str

    @classmethod
    def from_attr(cls, raw: Any) -> Restart | None:
        """From the stored form; None for what is not one (another writer's attribute)."""
        if not isinstance(raw, dict):
            return None
        try:
            step = raw.get("step")
            return cls(int(raw["attempt"]), None if step is None else int(step), float(raw["at"]), str(raw["reason"]))
        except (KeyError, TypeError, ValueError):
            return None


def restarts_from_attr(raw: Any) -> tuple[Restart, ...]:
    """The restarts as stored (the ``restarts`` attribute); what is not one is left out."""
    found = [Restart.from_attr(r) for r in raw] if isinstance(raw, list) else []
    return tuple(r for r in found if r is not None)


@dataclass(frozen=True)
class Lineage:
    """Where a PBT trial stands in its population, as the store keeps it (attribute ``pbt``):
    its generation and member, and its parent (the trial whose last checkpoint it starts from;
    None in the first generation) and whether it took the parent's parameters (``exploited``:
    it was in the worst fraction and copied a top trial) or went on from its own."""

    generation: int
    member: int
    parent_index: int | None = None
    parent_trial_id: str | None = None
    exploited: bool = False
    #: The parent's checkpoint step it was given at its launch (None: none, see ``note``).
    loaded_step: int | None = None
    #: Why it started without its parent's checkpoint (the parent kept none, the store refused).
    note: str | None = None

    def to_attr(self) -> dict[str, Any]:
        return {
            "generation": self.generation,
            "member": self.member,
            "parent_index": self.parent_index,
            "parent_trial_id": self.parent_trial_id,
            "exploited": self.exploited,
            "loaded_step": self.loaded_step,
            "note": self.note,
        }

    @classmethod
    def from_attr(cls, raw: Any) -> Lineage | None:
        """From the stored form; None for what is not one."""
        if not isinstance(raw, dict):
            return None
        try:
            parent, loaded = raw.get("parent_index"), raw.get("loaded_step")
            parent_id, note = raw.get("parent_trial_id"), raw.get("note")
            return cls(
                int(raw["generation"]),
                int(raw["member"]),
                None if parent is None else int(parent),
                parent_id if isinstance(parent_id, str) else None,
                bool(raw.get("exploited", False)),
                None if loaded is None else int(loaded),
                note[:500] if isinstance(note, str) else None,
            )
        except (KeyError, TypeError, ValueError):
            return None


@dataclass(frozen=True)
class TrialRecord:
    """One trial as the store holds it, in trialflow's terms (Optuna's stay in this module)."""

    storage_id: int
    number: int
    trial_index: int
    trial_id: str
    parameters: dict[str, Any]
    # The defaults are a trial just asked: waiting, not launched, nothing reported.
    status: TrialStatus = TrialStatus.WAITING
    #: Closed in the store (Optuna froze it): its outcome no longer changes.
    finished: bool = False
    handle: TrialHandle | None = None
    service_index: int | None = None
    #: The host a host-bound (local) trial was claimed for before its launch, when pinned.
    host: str | None = None
    started_at: float | None = None
    #: The final result as reported (a number, a dict with ``default``, or what the trial sent).
    final: Any = None
    message: str | None = None
    intermediate_count: int = 0
    last_step: int | None = None
    #: Who asked for this trial's parameters (a person's added trial or re-run: ``by``,
    #: ``reason``, ``at``); None when the tuner chose them.
    asked_by: dict[str, Any] | None = None
    #: Its restarts after faults, oldest first (trialflow.experiment.keeping).
    restarts: tuple[Restart, ...] = ()
    #: Its place in a Population Based Training population, and its parent (trialflow.tuning.pbt).
    lineage: Lineage | None = None

    @property
    def parameter_source(self) -> str:
        """parameter.cfg's ``parameter_source``, as NNI wrote it: ``customized`` or ``algorithm``."""
        return "customized" if self.asked_by else "algorithm"


@dataclass(frozen=True)
class TrialHistory:
    """One trial with its whole curve and its times, as an output that copies the experiment
    elsewhere (MLflow: trialflow.tracking) reads it; a warm start's prior trials included
    (``prior_of``: where it came from; no trial index)."""

    storage_id: int
    trial_index: int | None
    trial_id: str
    parameters: dict[str, Any]
    status: str
    finished: bool
    started_at: float | None
    ended_at: float | None
    intermediate: dict[int, float]
    final: Any
    asked_by: dict[str, Any] | None
    #: The task instance that ran it, as its start recorded it (TASK_ATTR), else None.
    task: Any
    service_index: int | None
    imported: bool
    prior_of: str | None

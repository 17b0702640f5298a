"""The shapes the store keeps beside a trial, read one way by the store's records, the rooms
that write them and the pages: a trial's restarts after faults (its ``restarts`` attribute,
written by trialflow.experiment.keeping) and its place in a Population Based Training population
(its ``pbt`` attribute, planned by trialflow.tuning.pbt). The store imports no tuner, so the
shapes live here, under both."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


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

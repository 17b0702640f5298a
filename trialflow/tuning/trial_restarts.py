"""A trial's restarts after faults, as the store keeps them (its ``restarts`` attribute): read
by the store's records, the keeping that writes them (trialflow.experiment.keeping) and the
trial page, one way."""

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

"""Trial rows as the store returns them (trialflow.store.results.TrialRow), for tests that
check what reads them without running trials."""

from __future__ import annotations

from typing import Any

from trialflow.store.results import TrialRow


def row(trial_index: int = 0, status: str = "SUCCEEDED", **fields: Any) -> TrialRow:
    """A row with the given fields, the rest as a trial that reported nothing has them."""
    values: dict[str, Any] = {
        "trial_index": trial_index,
        "trial_id": f"e-{trial_index:04d}",
        "parameters": {},
        "status": status,
        "final_metric": None,
        "final_metric_raw": None,
        "final_extra": {},
        "objective_values": None,
        "intermediate_count": 0,
        "message": None,
    }
    values.update(fields)
    return TrialRow(**values)

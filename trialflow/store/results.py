"""A trial's result: what its reported final becomes in Optuna, and the row summaries read.

Pure rules, no database: the store (trialflow.store.experiment_store) closes a trial with
``outcome`` and returns :class:`TrialRow` from ``trial_rows``; the end step, ``trialflow run``,
retune and the steering's re-run read those rows by attribute, never by string key.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trialflow.trial.protocol import describe_result
from trialflow.trial.protocol import scalar as _plain_scalar
from trialflow.trial.status import COUNTED_STATUS_NAMES, COUNTED_STATUSES, TrialStatus

if TYPE_CHECKING:
    from optuna.trial import TrialState


@dataclass(frozen=True)
class TrialRow:
    """One trial as summaries and progress read it, in trial-index order (``trial_rows``)."""

    trial_index: int | None
    trial_id: str | None
    parameters: dict[str, Any] | None
    #: NNI's status name (``SUCCEEDED``, ``USER_CANCELED``, ...), None before it was set.
    status: str | None
    #: The final result's number when it is finite, else None.
    final_metric: float | None
    #: The final result as stored (a number, "inf", a dict with ``default``, what was sent).
    final_metric_raw: Any
    #: A dict final's other keys.
    final_extra: dict[str, Any]
    #: Optuna's values of a COMPLETE trial, one per objective.
    objective_values: list[float] | None
    intermediate_count: int
    message: str | None
    #: Several objectives: {metric: value} (``pareto.with_values``), None otherwise or unknown.
    values: dict[str, float] | None = None

    @property
    def counted(self) -> bool:
        """Its final result counts (succeeded, or stopped early after reporting one)."""
        return self.status in COUNTED_STATUS_NAMES


def best_row(rows: list[TrialRow], optimize_mode: str) -> TrialRow | None:
    """The best succeeded trial by final metric, honouring maximize/minimize."""
    done = [r for r in rows if r.counted and r.final_metric is not None and math.isfinite(r.final_metric)]
    if not done:
        return None
    pick = min if optimize_mode == "minimize" else max
    return pick(done, key=lambda r: r.final_metric or 0.0)


def outcome(
    status: TrialStatus, final: Any, objectives: list[dict[str, str]] | None = None
) -> tuple[TrialState, list[float] | None, str | None]:
    """Optuna's state and values for a trial closed as ``status`` with ``final``, and why a
    SUCCEEDED trial has none (the reason joins its message). Several objectives: one value per
    objective, or FAIL with the reason (a missing or non-finite objective has no place on the
    front)."""
    from optuna.trial import TrialState  # here: the run's progress display reads rows only

    if objectives and status in COUNTED_STATUSES:
        values, problem = objective_values(final, objectives)
        return (TrialState.COMPLETE if values is not None else TrialState.FAIL), values, problem
    value = scalar(final)
    if status in COUNTED_STATUSES and value is not None and math.isfinite(value):
        return TrialState.COMPLETE, [value], None
    if status == TrialStatus.EARLY_STOPPED:
        return TrialState.PRUNED, None, None
    if status != TrialStatus.SUCCEEDED:
        return TrialState.FAIL, None, None
    if final is None:
        reason = "no final result reported"
    elif value is not None:  # stored as "inf" / "nan": the kind is known, the number is not
        reason = f"the final result ({final}) is not a finite number"
    else:
        reason = describe_result(final) or "the final result is not a number"
    return TrialState.FAIL, None, reason


def objective_values(final: Any, objectives: Sequence[dict[str, str]]) -> tuple[list[float] | None, str | None]:
    """The trial's values in objective order, or None and why they cannot be had (the trial
    then counts as failed: Optuna cannot place it on the front)."""
    names = [o["metric"] for o in objectives]
    if not isinstance(final, dict):
        return None, f"the final result must be a dict with {', '.join(names)} (the objectives), got {final!r:.60}"
    values = []
    for name in names:
        value = final.get(name)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None, f"the final result has no number {name!r} (objectives: {', '.join(names)})"
        if not math.isfinite(value):
            return None, f"the final result's {name!r} is {value}, not a finite number"
        values.append(float(value))
    return values, None


def preview(value: Any, limit: int = 40) -> str:
    """A reported value as a message quotes it: short, whatever the trial sent."""
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def finite_or_none(value: float | None) -> float | None:
    """JSON has no NaN or infinity: a diverged metric is shown and exported as no metric."""
    return value if value is not None and math.isfinite(value) else None


def is_finite_number(value: Any) -> bool:
    """A real number (a bool is not one) that is neither NaN nor infinite."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


_NON_FINITE = {"nan": math.nan, "infinity": math.inf, "inf": math.inf, "-infinity": -math.inf, "-inf": -math.inf}


def scalar(value: Any) -> float | None:
    """NNI's scalar reward, also reading NaN/Infinity back from their stored string form."""
    if isinstance(value, dict):
        value = value.get("default")
    if isinstance(value, str) and value.lower() in _NON_FINITE:
        return _NON_FINITE[value.lower()]
    return _plain_scalar(value)


def jsonable(value: Any) -> Any:
    """Optuna user attrs are JSON: NaN/Infinity are kept as strings, as nni's json_tricks writes them."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 2**63:
        return str(_plain_scalar(value))  # beyond what databases and JSON readers keep: "inf"
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [jsonable(v) for v in value]
    try:
        json.dumps(value)
        return value
    except TypeError:
        return repr(value)

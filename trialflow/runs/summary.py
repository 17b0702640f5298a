"""What the end step reports: the run's summary (its XCom), typed, and the log's results table.

The summary crosses processes as JSON (an XCom the continue and publish steps, the lineage
facet and a downstream DAG read), so its shape is a TypedDict: plain dicts at run time, every
key checked by mypy where it is built and where it is read. The verdict (which trials, which
best, whether the step fails) is decided in trialflow.runs; this module only says how
it is written down. No Airflow.
"""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict, cast

from trialflow.store.results import TrialRow


class SummaryTrial(TypedDict):
    """One trial of the run, as the summary lists it."""

    trial_index: int | None
    trial_id: str | None
    parameters: dict[str, Any] | None
    status: str | None
    final_metric: float | None
    final_extra: dict[str, Any]
    intermediate_count: int
    message: str | None
    #: Several objectives: {metric: value}.
    values: NotRequired[dict[str, float] | None]


class BestTrial(TypedDict):
    """The best trial (with several objectives: the Pareto set's first member, whose
    ``final_metric`` is its values by name)."""

    trial_index: int | None
    trial_id: str | None
    parameters: dict[str, Any] | None
    final_metric: float | dict[str, float] | None
    final_extra: dict[str, Any]


class ParetoMember(TypedDict):
    trial_index: int | None
    trial_id: str | None
    parameters: dict[str, Any] | None
    values: dict[str, float] | None


class FollowOn(TypedDict):
    """The follow-on run that carries an unbounded experiment on (``run_id`` None: none does,
    ``reason`` says why)."""

    run_id: str | None
    conf: dict[str, Any]
    reason: str


class StoppedBy(TypedDict):
    """A person's stop (or Airflow's mark failed on the run)."""

    by: str | None
    at: float | None
    reason: str | None


class ExperimentSummary(TypedDict):
    """The end step's XCom."""

    experiment_id: str
    experiment_name: str | None
    optimize_mode: str
    status_counts: dict[str, int]
    #: This run's best, and the whole experiment's (a run that continues a study).
    best: BestTrial | None
    study_best: BestTrial | None
    trials: list[SummaryTrial]
    continuation: FollowOn
    stopped: StoppedBy | None
    objectives: NotRequired[list[dict[str, str]]]
    pareto: NotRequired[list[ParetoMember]]


def summary_trial(row: TrialRow, several: bool) -> SummaryTrial:
    trial = SummaryTrial(
        trial_index=row.trial_index,
        trial_id=row.trial_id,
        parameters=row.parameters,
        status=row.status,
        final_metric=row.final_metric,
        final_extra=row.final_extra,
        intermediate_count=row.intermediate_count,
        message=row.message,
    )
    if several:
        trial["values"] = row.values
    return trial


def best_trial(row: TrialRow, several: bool) -> BestTrial:
    """``row`` as ``best``: with several objectives its final metric is its values."""
    return BestTrial(
        trial_index=row.trial_index,
        trial_id=row.trial_id,
        parameters=row.parameters,
        final_metric=row.values if several else row.final_metric,
        final_extra=row.final_extra,
    )


def pareto_member(row: TrialRow) -> ParetoMember:
    return ParetoMember(
        trial_index=row.trial_index, trial_id=row.trial_id, parameters=row.parameters, values=row.values
    )


def stopped_by(mark: dict[str, Any] | None) -> StoppedBy | None:
    """A run window's stop mark as the summary says it."""
    if not mark:
        return None
    return StoppedBy(by=mark.get("by"), at=mark.get("at"), reason=mark.get("reason"))


def as_summary(value: Any) -> ExperimentSummary | None:
    """An XCom pulled back (JSON): the summary, or None when the end step wrote none (it failed
    before, or was skipped)."""
    return cast("ExperimentSummary", value) if isinstance(value, dict) and "experiment_id" in value else None


def format_table(rows: list[TrialRow], marked: set[int]) -> str:
    """A plain-text results table for the task log (``*``: the best trial, or the Pareto set);
    a dict final's other keys follow its value; several objectives show their values."""
    lines = [f"{'':1} {'trial':>5}  {'id':<14} {'status':<14} {'final':>12}  {'#int':>4}  parameters"]
    for r in rows:
        if r.values:
            final = " ".join(f"{k}={v:.4g}" for k, v in r.values.items())
        else:
            final = "" if r.final_metric is None else f"{r.final_metric:.6g}"
        mark = "*" if r.trial_index in marked else " "
        extra = f"  {r.final_extra}" if r.final_extra else ""
        lines.append(
            f"{mark} {r.trial_index:>5}  {r.trial_id or '':<14} {r.status or '':<14} "
            f"{final:>12}  {r.intermediate_count:>4}  {r.parameters}{extra}"
        )
    return "\n".join(lines)


#: The end step's second XCom: what a task downstream of an experiment task group takes
#: (``tune.best``).
BEST_PARAMETERS_KEY = "best_parameters"
#: The end step's third XCom: the best trial's result (``tune.best_value``).
BEST_VALUE_KEY = "best_value"


def best_parameters(summary: ExperimentSummary) -> dict[str, Any] | list[ParetoMember] | None:
    """The experiment's best parameters, as a task downstream of it takes them: with one
    objective the best trial's parameters (across the experiment's runs, as the Asset publishes
    them); with several the whole Pareto set (no single best: the task chooses). None when no
    trial succeeded with a final result."""
    if len(summary.get("objectives") or ()) > 1:
        return list(summary.get("pareto") or [])
    best = summary["study_best"] or summary["best"]
    return dict(best["parameters"] or {}) if best else None


def best_value(summary: ExperimentSummary) -> float | dict[str, float] | list[dict[str, float]] | None:
    """The result that made ``best_parameters`` the best, as plainly: with one objective the
    best trial's final metric (a number: the default metric of a dict final); with several the
    Pareto set's values, in the order of ``best_parameters``' list. None when no trial
    succeeded with a final result. Choosing the better of two experiments downstream is then
    ``max(a.best_value, b.best_value)``, with no key path into the summary."""
    if len(summary.get("objectives") or ()) > 1:
        return [dict(member.get("values") or {}) for member in summary.get("pareto") or []]
    best = summary["study_best"] or summary["best"]
    return best["final_metric"] if best else None

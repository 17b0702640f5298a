"""What an experiment tells the DAGs downstream: its best parameters, as an Asset event's extra.

No Airflow here. The publishing step and the downstream helper (trialflow.assets) only move
these dicts in and out of Airflow's asset events, so what is published, when nothing is, and
how a downstream DAG reads it back (checked, typed) are decided and tested without a scheduler.
The extra is plain JSON: a downstream DAG without trialflow installed can still read it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: Marks an asset event's extra as trialflow's, and the shape it has (bumped on a breaking change).
FORMAT_KEY = "trialflow"
FORMAT = 1


def asset_name(dag_id: str) -> str:
    """The asset an experiment DAG publishes to unless ``experiment_dag(asset_name=...)`` says
    otherwise: named after the DAG, which is named after the experiment."""
    return f"trialflow/{dag_id}/best"


@dataclass(frozen=True)
class Objective:
    """One objective of the published result: the metric's name and its direction."""

    metric: str
    mode: str


@dataclass(frozen=True)
class ParetoTrial:
    """One trial of the Pareto set (several objectives): no other trial is as good on every
    objective and better on one."""

    trial_id: str
    trial_index: int
    parameters: dict[str, Any]
    values: dict[str, float]


@dataclass(frozen=True)
class PublishedBest:
    """An experiment's outcome as a downstream DAG reads it.

    With one objective, ``parameters``/``metric`` are the best trial's. With several, ``pareto``
    holds the whole set and ``parameters``/``metric``/``trial_id`` are its first member's (by the
    first objective), so code written for one objective keeps working."""

    experiment_id: str
    experiment_name: str | None
    dag_id: str
    run_id: str
    trial_id: str
    trial_index: int
    parameters: dict[str, Any]
    metric: float | dict[str, float]
    optimize_mode: str
    url: str | None = None
    directory: str | None = None
    objectives: tuple[Objective, ...] = ()
    pareto: tuple[ParetoTrial, ...] = field(default_factory=tuple)

    @property
    def multi_objective(self) -> bool:
        return len(self.objectives) > 1


def decide(
    summary: dict[str, Any] | None, dag_id: str, run_id: str, url: str | None, directory: str | None = None
) -> tuple[dict[str, Any] | None, str]:
    """The extra to publish for an end step's summary, or None and why nothing is published.

    Published: the experiment's best (across its runs), once the experiment is over. Not: when
    the end step gave no summary (it failed: no trial succeeded), when the experiment goes on in
    a follow-on run (its last run publishes), or when no trial has a final result. ``directory``:
    the experiment's folder on the Airflow hosts (where a downstream step may put what it makes)."""
    if not summary:
        return None, "the end step has no summary (no trial of this run succeeded, or it did not run)"
    following = summary.get("continuation") or {}
    if following.get("run_id"):
        return None, f"the experiment goes on in run {following['run_id']}; its last run publishes"
    best = summary.get("study_best") or summary.get("best")
    if not best:
        return None, f"no trial of experiment {summary.get('experiment_id')} succeeded with a final result"
    extra: dict[str, Any] = {
        FORMAT_KEY: FORMAT,
        "experiment_id": summary["experiment_id"],
        "experiment_name": summary.get("experiment_name"),
        "dag_id": dag_id,
        "run_id": run_id,
        "trial_id": best["trial_id"],
        "trial_index": best["trial_index"],
        "parameters": best["parameters"],
        "metric": best["final_metric"],
        "optimize_mode": summary.get("optimize_mode"),
        "url": url,
        "directory": directory,
    }
    if summary.get("objectives"):
        extra["objectives"] = summary["objectives"]
        extra["pareto"] = [
            {k: p[k] for k in ("trial_id", "trial_index", "parameters", "values")} for p in summary.get("pareto") or []
        ]
    return extra, f"best trial {best['trial_id']}: {best['parameters']} = {best['final_metric']}"


class NotPublished(LookupError):
    """An asset event that is not an experiment's published outcome (or no event at all)."""


def read(extra: Any, where: str = "asset event") -> PublishedBest:
    """A published extra back as a PublishedBest; NotPublished names what is missing or wrong."""
    if not isinstance(extra, dict) or extra.get(FORMAT_KEY) is None:
        raise NotPublished(f"{where}: not a trialflow experiment's result (its extra has no {FORMAT_KEY!r} key)")
    if extra[FORMAT_KEY] != FORMAT:
        raise NotPublished(
            f"{where}: result format {extra[FORMAT_KEY]!r}, this trialflow reads {FORMAT}; upgrade trialflow"
        )
    expected: dict[str, type | tuple[type, ...]] = {
        "experiment_id": str,
        "dag_id": str,
        "run_id": str,
        "trial_id": str,
        "trial_index": int,
        "parameters": dict,
        "metric": (int, float, dict),
        "optimize_mode": str,
    }
    for key, kind in expected.items():
        if not isinstance(extra.get(key), kind) or isinstance(extra.get(key), bool):
            raise NotPublished(f"{where}: extra key {key!r}: expected {_kind_name(kind)}, got {extra.get(key)!r}")
    try:
        objectives = tuple(Objective(str(o["metric"]), str(o["mode"])) for o in extra.get("objectives") or ())
        pareto = tuple(
            ParetoTrial(str(p["trial_id"]), int(p["trial_index"]), dict(p["parameters"]), dict(p["values"]))
            for p in extra.get("pareto") or ()
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise NotPublished(
            f"{where}: extra keys 'objectives'/'pareto': expected lists of mappings with "
            f"metric/mode and trial_id/trial_index/parameters/values ({type(exc).__name__}: {exc})"
        ) from None
    return PublishedBest(
        experiment_id=extra["experiment_id"],
        experiment_name=extra.get("experiment_name"),
        dag_id=extra["dag_id"],
        run_id=extra["run_id"],
        trial_id=extra["trial_id"],
        trial_index=extra["trial_index"],
        parameters=extra["parameters"],
        metric=extra["metric"],
        optimize_mode=extra["optimize_mode"],
        url=extra.get("url"),
        directory=extra.get("directory"),
        objectives=objectives,
        pareto=pareto,
    )


def _kind_name(kind: type | tuple[type, ...]) -> str:
    names = {str: "text", int: "a whole number", float: "a number", dict: "a mapping"}
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(dict.fromkeys(names[k] for k in kinds))

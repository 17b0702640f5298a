"""The experiment in lineage: an OpenLineage run facet on the end step's events.

Where Airflow's OpenLineage provider is installed (``pip install 'airflow-provider-trialflow[lineage]'``)
and configured, its listener asks each operator for ``get_openlineage_facets_on_complete``; the
end step answers with ``trialflow_experiment``: the search space, the objectives, the best
parameters and metric (or the Pareto set), so a lineage tool shows which data produced which
parameters. Without the provider nothing here is imported and nothing changes: the listener
that would call it does not exist, and ``operator_lineage`` returns None.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trialflow.runs.summary import ExperimentSummary

#: The facet's key in the run's facets.
FACET_NAME = "trialflow_experiment"


def facet_fields(summary: ExperimentSummary, search_space: dict[str, Any] | None) -> dict[str, Any]:
    """What the facet carries, from the end step's summary (plain JSON: a lineage backend stores
    it as sent). The experiment's best across its runs, or its Pareto set."""
    best = summary["study_best"] or summary["best"]
    return {
        "experimentId": summary["experiment_id"],
        "experimentName": summary["experiment_name"],
        "optimizeMode": summary["optimize_mode"],
        "searchSpace": search_space or {},
        "objectives": summary.get("objectives") or [],
        "bestTrialId": best["trial_id"] if best else None,
        "bestParameters": best["parameters"] if best else None,
        "bestMetric": best["final_metric"] if best else None,
        "paretoSet": [
            {"trialId": p["trial_id"], "parameters": p["parameters"], "values": p["values"]}
            for p in summary.get("pareto") or []
        ],
        "trialCounts": summary["status_counts"],
    }


@cache
def _facet_class() -> type:
    import attr
    from openlineage.client.facet_v2 import RunFacet

    @attr.define
    class TrialflowExperimentRunFacet(RunFacet):
        """A tuning experiment: its search space and what it found."""

        experimentId: str | None = None
        experimentName: str | None = None
        optimizeMode: str | None = None
        searchSpace: dict[str, Any] = attr.field(factory=dict)
        objectives: list[dict[str, Any]] = attr.field(factory=list)
        bestTrialId: str | None = None
        bestParameters: dict[str, Any] | None = None
        bestMetric: Any = None
        paretoSet: list[dict[str, Any]] = attr.field(factory=list)
        trialCounts: dict[str, int] = attr.field(factory=dict)

    return TrialflowExperimentRunFacet


def operator_lineage(summary: ExperimentSummary | None, search_space: dict[str, Any] | None) -> Any:
    """The end step's OperatorLineage (run facet only), or None without the provider or a summary."""
    if not summary:
        return None
    try:
        from airflow.providers.openlineage.extractors.base import OperatorLineage
    except ImportError:
        return None
    facet = _facet_class()(**facet_fields(summary, search_space))
    return OperatorLineage(run_facets={FACET_NAME: facet})

"""An experiment's best parameters as an Airflow Asset, and the one call a downstream DAG makes.

The experiment DAG's ``publish_best`` step emits an event on its asset when the experiment is
over with a result (trialflow.published decides what and when). A DAG scheduled on that asset::

    from trialflow.assets import best_parameters, best_parameters_asset

    digits_best = best_parameters_asset("trialflow_digits_svc")

    @dag(schedule=[digits_best])
    def final_model():
        @task
        def train(**context):
            best = best_parameters(context)          # typed: trialflow.published.PublishedBest
            fit(**best.parameters)

It reads Airflow's own asset events (the run's triggering events, or a task's ``inlet_events``),
never the experiment store, so it works on any worker and needs no store connection.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from airflow.sdk import Asset

from trialflow.published import NotPublished, PublishedBest, asset_name, read

__all__ = ["NotPublished", "PublishedBest", "best_parameters", "best_parameters_asset"]


def best_parameters_asset(dag_id: str, name: str | None = None) -> Asset:
    """The asset experiment DAG ``dag_id`` publishes to (``name``: the one given to
    ``experiment_dag(asset_name=...)``, when it was)."""
    name = name or asset_name(dag_id)
    return Asset(name=name, uri=name, group="trialflow")


def best_parameters(context: Mapping[str, Any], asset: Asset | None = None) -> PublishedBest:
    """The published best of the experiment whose event started this DAG run (the newest, when
    several did), or, for a task with ``inlets=[asset]``, the newest published on ``asset``.

    ``asset``: which experiment, when the run is scheduled on several assets. Raises
    NotPublished (a LookupError) naming what was looked at when there is no such event."""
    triggering = context.get("triggering_asset_events") or {}
    events = _events_for(triggering, asset)
    where = "this DAG run's triggering asset events"
    if not events and asset is not None:
        inlets = context.get("inlet_events")
        if inlets is not None:
            try:
                events = list(inlets[asset])
            except (KeyError, TypeError):  # the task does not declare it as an inlet
                events = []
            where = f"inlet events of asset {asset.name!r}"
    claimed = [e for e in events if isinstance(getattr(e, "extra", None), dict) and "trialflow" in e.extra]
    # An asset event can also be created through the REST API with any extra: only one the
    # experiment DAG it names emitted itself counts (Airflow records the emitting DAG run).
    published = [e for e in claimed if getattr(e, "source_dag_id", None) == e.extra.get("dag_id")]
    if claimed and not published:
        raise NotPublished(
            f"{where}: {len(claimed)} event(s) claim to be an experiment's result but were not emitted by "
            f"the DAG they name (source DAG {getattr(claimed[-1], 'source_dag_id', None)!r}, extra names "
            f"{claimed[-1].extra.get('dag_id')!r}): refused"
        )
    if not published:
        wanted = f"asset {asset.name!r}" if asset is not None else "a trialflow experiment's asset"
        raise NotPublished(
            f"{where}: no event of {wanted} (schedule the DAG on best_parameters_asset(...), "
            "or declare it in the task's inlets)"
        )
    newest = max(published, key=lambda e: e.timestamp)
    return read(newest.extra, where=f"asset event on {getattr(getattr(newest, 'asset', None), 'name', '?')!r}")


def _events_for(triggering: Mapping[Any, Sequence[Any]], asset: Asset | None) -> list[Any]:
    if asset is not None:
        try:
            return list(triggering[asset])
        except KeyError:
            return []
    return [event for key in triggering for event in triggering[key]]

"""An experiment's best parameters as an Airflow Asset, and the one call a downstream DAG makes.

The experiment DAG's ``publish_best`` step emits an event on its asset when the experiment is
over with a result (trialflow.outputs.published decides what and when). A DAG scheduled on that asset::

    from trialflow.assets import best_parameters, best_parameters_asset

    digits_best = best_parameters_asset("trialflow_digits_svc")

    @dag(schedule=[digits_best])
    def final_model():
        @task
        def train(**context):
            best = best_parameters(context)          # typed: trialflow.outputs.published.PublishedBest
            fit(**best.parameters)

It reads Airflow's own asset events (the run's triggering events, or a task's ``inlet_events``),
never the experiment store, so it works on any worker and needs no store connection.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from airflow.sdk import Asset, ObjectStoragePath

from trialflow.outputs.published import (
    OWNER_KEY,
    NotPublished,
    PublishedBest,
    approval_markdown,
    named_owner,
    publishing_name,
    read_published,
)

__all__ = [
    "NotPublished",
    "PublishedBest",
    "approval_text",
    "best_artifact",
    "best_parameters",
    "best_parameters_asset",
    "published",
    "register_best_model",
]


def best_parameters_asset(dag_id: str, name: str | None = None) -> Asset:
    """The asset experiment DAG ``dag_id`` publishes to (``name``: the one given to
    ``experiment_dag(asset_name=...)``, when it was). A name outside trialflow's namespace
    carries ``dag_id`` in the asset's extra: the reader accepts events of that DAG only."""
    name = publishing_name(dag_id, name)
    if named_owner(name) == dag_id:
        return Asset(name=name, uri=name, group="trialflow")
    return Asset(name=name, uri=name, group="trialflow", extra={OWNER_KEY: dag_id})


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
    # Only the DAG the asset is for may publish on it: an asset event can be created through the
    # REST API with any extra, and another DAG could name the asset as its own outlet. Airflow
    # records which DAG emitted an event; the asset's owner comes from its name (trialflow/<dag>/)
    # or, for a custom name, from the asset the caller passed (best_parameters_asset's extra).
    published = [e for e in claimed if _owner(e, asset) == getattr(e, "source_dag_id", None) == e.extra.get("dag_id")]
    if claimed and not published:
        last = claimed[-1]
        owner = _owner(last, asset)
        whose = (
            f"belongs to DAG {owner!r}"
            if owner
            else "is not named for a DAG: pass asset=best_parameters_asset(dag_id, name) to say which"
        )
        raise NotPublished(
            f"{where}: {len(claimed)} event(s) claim to be an experiment's result but were not emitted by "
            f"the experiment DAG the asset is for (asset {_asset_name(last)!r} {whose}; emitted by "
            f"{getattr(last, 'source_dag_id', None)!r}, extra names {last.extra.get('dag_id')!r}): refused"
        )
    if not published:
        wanted = f"asset {asset.name!r}" if asset is not None else "a trialflow experiment's asset"
        raise NotPublished(
            f"{where}: no event of {wanted} (schedule the DAG on best_parameters_asset(...), "
            "or declare it in the task's inlets)"
        )
    newest = max(published, key=lambda e: e.timestamp)
    return read_published(
        newest.extra, where=f"asset event on {getattr(getattr(newest, 'asset', None), 'name', '?')!r}"
    )


def published(value: Any) -> PublishedBest:
    """The experiment's outcome handed on inside its own DAG: what an ExperimentTaskGroup's
    ``published`` XComArg gives a downstream task (the same result its Asset event carries, with
    the best trial's artifacts), so that a task of the same DAG needs no asset inlet::

        @task
        def promote(result: dict) -> None:
            best = published(result)
            with best_artifact(best, "model.pkl").open("rb") as model: ...

        promote(tune.published)

    NotPublished naming what is wrong for a value that is not a published result."""
    return read_published(value, where="the experiment group's published result")


def best_artifact(best: PublishedBest, name: str) -> ObjectStoragePath:
    """The best trial's artifact ``name`` (a model it trained) as an ObjectStoragePath through
    the artifact store's Airflow connection: ``with best_artifact(best, "model.pkl").open("rb")``.
    KeyError for a name it did not publish (no path outside its artifacts folder is reachable)."""
    return ObjectStoragePath(best.artifact_url(name), conn_id=best.artifact_conn_id)


def approval_text(triggering_asset_events: Mapping[Any, Sequence[Any]], asset: Asset | None = None) -> str:
    """The Markdown an approval shows, for a DAG's ``user_defined_macros``: built from the
    result ``best_parameters`` accepts (emitted by the asset's own DAG), every value escaped,
    its link only to this Airflow. A forged or missing event is said, not shown::

        body="{{ approval_text(triggering_asset_events) }}"
    """
    from airflow.configuration import conf

    try:
        best = best_parameters({"triggering_asset_events": triggering_asset_events}, asset)
    except NotPublished as exc:
        return f"Nothing to approve: no experiment result this DAG may use ({exc})."
    configured = urlsplit(conf.get("api", "base_url", fallback="") or "")
    origin = f"{configured.scheme}://{configured.netloc}" if configured.scheme and configured.netloc else None
    return approval_markdown(best, origin)


def _asset_name(event: Any) -> str:
    return str(getattr(getattr(event, "asset", None), "name", "") or "")


def _owner(event: Any, asset: Asset | None) -> str | None:
    """The experiment DAG the event's asset belongs to: from a trialflow name, else from the
    asset the caller named (when it is the event's), else unknown (None: refused)."""
    name = _asset_name(event)
    owner = named_owner(name)
    if owner is not None:
        return owner
    if asset is not None and asset.name == name:
        extra = getattr(asset, "extra", None) or {}
        found = extra.get(OWNER_KEY)
        return found if isinstance(found, str) else None
    return None


def _events_for(triggering: Mapping[Any, Sequence[Any]], asset: Asset | None) -> list[Any]:
    if asset is not None:
        try:
            return list(triggering[asset])
        except KeyError:
            return []
    return [event for key in triggering for event in triggering[key]]


def register_best_model(
    context: Mapping[str, Any],
    best: PublishedBest,
    artifact: str = "model.pkl",
    approval_task_id: str = "approve",
    model_name: str | None = None,
    store_conn_id: str = "trialflow_default",
    flavor: str | None = None,
) -> Any:
    """Register the best trial's model ``artifact`` as a new version in MLflow's model registry
    (the experiment's ``mlflow`` key names the server and ``registeredModel``), saying who
    approved it and when: the response of ``approval_task_id`` (an ApprovalOperator) in this DAG
    run. ``flavor`` (``"sklearn"``: a pickled scikit-learn estimator) makes the version an
    MLflow Model that ``mlflow.pyfunc.load_model("models:/<name>/<version>")`` loads; without
    it, ``models:/`` downloads the file. Returns the version
    (trialflow.tracking.registry.RegisteredVersion); a retried task finds the version it made.
    The experiment must be the one the asset's own DAG ran (an experiment of another DAG is
    refused)."""
    from trialflow.hooks import airflow_connections
    from trialflow.hooks.experiment_store import ExperimentStoreHook
    from trialflow.tracking.registry import NotRegistered, approval_of, register_model
    from trialflow.tracking.runner import Tracking

    store = ExperimentStoreHook(store_conn_id).get_conn()
    if store.experiment_attr(best.experiment_id, "dag_id") != best.dag_id:
        raise NotRegistered(f"experiment {best.experiment_id} is not one DAG {best.dag_id} ran: nothing registered")
    tracking = Tracking.open(store, best.experiment_id, airflow_connections())
    if tracking is None:
        raise NotRegistered(f"experiment {best.experiment_id} names no MLflow server (its config has no mlflow key)")
    approval = approval_of(
        context["ti"].xcom_pull(task_ids=approval_task_id),
        approval_task_id,
        f"{context['dag'].dag_id}/{context['run_id']}",
    )
    with best_artifact(best, artifact).open("rb") as source:
        data = source.read()
    return register_model(
        tracking, best.trial_index, artifact, data, approval, model_name, best.artifact_url(artifact), flavor
    )

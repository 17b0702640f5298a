"""Tracking for an experiment, as its steps call it: one pass of the sync, a trial's own run
before it starts, the link for its pages. No Airflow: the callers hand in the connections, the
page addresses and Airflow's masker.

A trial is told its MLflow run (MLFLOW_RUN_ID, MLFLOW_EXPERIMENT_ID, MLFLOW_TRACKING_URI without
credentials), so trial code that calls ``mlflow.start_run()`` logs into its own nested run. That
needs the run made before the trial starts: one request once the experiment's run exists (the
outbox keeps the MLflow experiment's id), each of at most ``TRIAL_REQUEST_TIMEOUT`` seconds,
within ``TRIAL_RUN_BUDGET`` when another process is making it; a trial whose run could not be
made then starts without being told (its run is made by the next pass, with everything
trialflow has of it).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from trialflow.config.checkpoints import ARTIFACT_STORE_ATTR, ArtifactStore
from trialflow.config.redaction import mask_text
from trialflow.config.tracking import MlflowConfig
from trialflow.platforms.base import Connections
from trialflow.store.experiment_store import ExperimentStore
from trialflow.tracking.content import ExperimentFacts, LinkBack
from trialflow.tracking.mlflow_rest import MlflowRest, TrackingUnavailable
from trialflow.tracking.outbox import Outbox
from trialflow.tracking.sync import (
    RunBeingMade,
    SyncReport,
    Tracked,
    TrackingClient,
    TrackingPass,
    facts_of,
    say_away,
    sync_experiment,
)
from trialflow.tracking.target import TrackingNotConfigured, TrackingTarget, resolve

log = logging.getLogger(__name__)

#: Seconds a trial's start waits for MLflow to make its run, at most (see module), and for
#: each of its requests (a server that is down refuses at once; a hung one costs this).
TRIAL_RUN_BUDGET = 3.0
TRIAL_REQUEST_TIMEOUT = 2.5
#: Seconds between two looks while another process makes the run a trial waits for.
BUSY_PAUSE = 0.2
#: Seconds the end step gives its last pass.
END_PASS_BUDGET = 30.0
#: The experiment attribute holding the owning DAG's id (the start step writes it).
DAG_ATTR = "dag_id"
#: The experiment attributes tracking reads: its recorded config, where its artifacts are, its
#: DAG, its name and direction. Read by name: an experiment keeps one attribute per run.
TRACKED_ATTRS = ("config", ARTIFACT_STORE_ATTR, DAG_ATTR, "experiment_name", "optimize_mode")


def tracked_attrs(store: ExperimentStore, experiment_id: str) -> dict[str, Any]:
    """The experiment's TRACKED_ATTRS as its start step recorded them (one statement)."""
    return store.experiment_attrs_named(experiment_id, TRACKED_ATTRS)


def tracked(
    attrs: Mapping[str, Any],
    experiment_id: str,
    target: TrackingTarget,
    links: LinkBack | None = None,
    mask: Callable[[str], str] | None = None,
    status: str | None = None,
) -> Tracked:
    """The experiment as tracking sees it (sync.Tracked), from what its start step recorded in
    the store (``attrs``: its TRACKED_ATTRS, :func:`tracked_attrs`; its config in NNI's v2
    form, secrets masked): the same wherever it is read, the command line included, without
    the config file. Pure."""
    stored = attrs.get("config")
    config: dict[str, Any] = stored if isinstance(stored, dict) else {}
    where = ArtifactStore.from_attr(attrs.get(ARTIFACT_STORE_ATTR))
    dag_id, name = attrs.get(DAG_ATTR), attrs.get("experiment_name")
    services = config.get("trainingService")
    services = services if isinstance(services, list) else [services] if isinstance(services, dict) else []
    platforms = tuple(str(s.get("platform")) for s in services if isinstance(s, dict))
    links = links or LinkBack()
    settings = {
        "tuner": _name_of(config.get("tuner")),
        "assessor": _name_of(config.get("assessor")),
        "optimize_mode": attrs.get("optimize_mode"),
        "trialConcurrency": config.get("trialConcurrency"),
        "maxTrialNumber": config.get("maxTrialNumber"),
        "platform": ", ".join(platforms),
        "searchSpace": config.get("searchSpace"),
    }
    objectives = config.get("objectives")
    chosen = (
        [
            {"metric": str(o.get("metric")), "mode": str(o.get("mode", "maximize"))}
            for o in objectives
            if isinstance(o, dict)
        ]
        if isinstance(objectives, list) and objectives
        else None
    )
    return Tracked(
        experiment_id=experiment_id,
        mlflow_experiment=target.experiment_name,
        facts=ExperimentFacts(
            experiment_id=experiment_id,
            name=str(name or experiment_id),
            dag_id=dag_id if isinstance(dag_id, str) else None,
            settings=settings,
            page=links.experiment_page,
            status=status,
        ),
        optimize_mode="minimize" if attrs.get("optimize_mode") == "minimize" else "maximize",
        objectives=chosen,
        platforms=platforms,
        artifacts=where.url if where is not None else None,
        links=links,
        mask=_masking(mask),
    )


def _name_of(algorithm: object) -> str | None:
    if isinstance(algorithm, dict):
        return str(algorithm.get("name") or algorithm.get("className") or "") or None
    return None


def _masking(extra: Callable[[str], str] | None) -> Callable[[str], str]:
    """trialflow's masker, then the caller's (Airflow's, which knows the connections' secrets)."""
    if extra is None:
        return mask_text
    return lambda text: extra(mask_text(text))


def mlflow_config(store: ExperimentStore, experiment_id: str) -> MlflowConfig | None:
    """The experiment's ``mlflow`` key as its start recorded it; None: it names no server."""
    return mlflow_config_of({"config": store.experiment_attr(experiment_id, "config")}, experiment_id)


def mlflow_config_of(attrs: Mapping[str, Any], experiment_id: str) -> MlflowConfig | None:
    """:func:`mlflow_config` from the experiment's attributes already read (pure)."""
    config = attrs.get("config")
    raw = config.get("mlflow") if isinstance(config, dict) else None
    if raw is None:
        return None
    try:
        return MlflowConfig.model_validate(raw)
    except ValueError as exc:
        raise TrackingNotConfigured(f"experiment {experiment_id!r}: its mlflow key is not one: {exc}") from None


def target_of(store: ExperimentStore, experiment_id: str, connections: Connections | None) -> TrackingTarget | None:
    """The experiment's tracking server, None when it names none; TrackingNotConfigured when
    it names one trialflow cannot reach from here."""
    return target_from(tracked_attrs(store, experiment_id), experiment_id, connections)


def target_from(attrs: Mapping[str, Any], experiment_id: str, connections: Connections | None) -> TrackingTarget | None:
    """:func:`target_of` from the experiment's attributes already read."""
    chosen = mlflow_config_of(attrs, experiment_id)
    if chosen is None:
        return None
    return resolve(chosen, str(attrs.get("experiment_name") or experiment_id), connections)


@dataclass(frozen=True)
class Tracking:
    """An experiment's tracking, opened where a step runs."""

    store: ExperimentStore
    experiment_id: str
    target: TrackingTarget
    client: TrackingClient

    @classmethod
    def open(
        cls,
        store: ExperimentStore,
        experiment_id: str,
        connections: Connections | None,
        target: TrackingTarget | None = None,
        timeout: float | None = None,
    ) -> Tracking | None:
        """None when the experiment names no tracking server."""
        target = target or target_of(store, experiment_id, connections)
        if target is None:
            return None
        client = MlflowRest(target) if timeout is None else MlflowRest(target, timeout)
        return cls(store, experiment_id, target, client)

    def sync(
        self,
        links: LinkBack | None = None,
        mask: Callable[[str], str] | None = None,
        status: str | None = None,
        budget: float = 60.0,
    ) -> SyncReport:
        """One pass, for at most ``budget`` seconds (what is left waits for the next)."""
        what = tracked(
            tracked_attrs(self.store, self.experiment_id), self.experiment_id, self.target, links, mask, status
        )
        return sync_experiment(self.store, what, self.client, time.monotonic() + budget)

    def trial_env(
        self,
        storage_id: int,
        links: LinkBack | None = None,
        mask: Callable[[str], str] | None = None,
        attrs: Mapping[str, Any] | None = None,
    ) -> dict[str, str]:
        """What a trial is told of its MLflow run (see module); {} when MLflow did not make it
        in time (the trial starts all the same). ``attrs``: the experiment's TRACKED_ATTRS
        where the caller read them already."""
        attrs = tracked_attrs(self.store, self.experiment_id) if attrs is None else attrs
        what = tracked(attrs, self.experiment_id, self.target, links, mask)
        history = self.store.trial_history(storage_id)
        facts = facts_of(history, what)
        outbox = Outbox(self.store.engine, self.store.study_id(self.experiment_id))
        deadline = time.monotonic() + TRIAL_RUN_BUDGET
        work = TrackingPass(what, self.client, outbox)
        while True:
            try:
                rows = outbox.rows()
                mlflow_id, parent = work.parent(rows)
                run_id, _ = work.trial_run(facts, rows.get(facts.run_key), parent, mlflow_id)
                break
            except RunBeingMade:  # another process is making the experiment's run (or this one's): it is there soon
                if time.monotonic() + BUSY_PAUSE >= deadline:
                    log.warning("trial %s starts without its MLflow run (made by the next pass)", facts.trial_id)
                    return {}
                time.sleep(BUSY_PAUSE)
            except TrackingUnavailable as exc:
                log.warning("trial %s starts without its MLflow run (made later): %s", facts.trial_id, exc)
                return {}
        return {
            "MLFLOW_TRACKING_URI": self.target.uri,
            "MLFLOW_EXPERIMENT_ID": mlflow_id,
            "MLFLOW_RUN_ID": run_id,
        }

    def run_ids(self) -> dict[str, str]:
        """Each run's MLflow id, by outbox key (``experiment``, trial indexes)."""
        return Outbox(self.store.engine, self.store.study_id(self.experiment_id)).run_ids()

    def run_urls(self) -> dict[str, str]:
        """Each run's page in MLflow, by outbox key (``experiment``, trial indexes)."""
        outbox = Outbox(self.store.engine, self.store.study_id(self.experiment_id))
        return {key: row.run_url for key, row in outbox.rows().items() if row.run_url}


def open_tracking(
    store: ExperimentStore,
    experiment_id: str,
    connections: Connections | None,
    timeout: float | None = None,
    attrs: Mapping[str, Any] | None = None,
) -> Tracking | None:
    """The experiment's tracking; None when it names none or names one not reachable from here
    (said in the log and on the experiment's pages, never raised: tracking never fails a step).
    A connection missing where Airflow runs made a run "success" with nothing in MLflow and a
    warning only in one task's log (issue 64, 2)."""
    try:
        target = None if attrs is None else target_from(attrs, experiment_id, connections)
        if attrs is not None and target is None:
            return None
        return Tracking.open(store, experiment_id, connections, target=target, timeout=timeout)
    except (TrackingNotConfigured, TrackingUnavailable) as exc:
        log.warning("experiment %s is not logged to MLflow here: %s", experiment_id, exc)
        try:
            say_away(store, experiment_id, str(exc), "MLflow not reached")
        except Exception:  # the store is what failed: the log has said it
            log.exception("could not record that experiment %s is not logged to MLflow", experiment_id)
        return None


@dataclass(frozen=True)
class TrialStartTracking:
    """What a trial's start tells tracking: its MLflow run, made before it is launched
    (trialflow.lifecycle.trial_lifecycle.StartTracking is the seam it is called through). The
    attributes it needs (``reads``) come with the start's own read of the experiment."""

    store: ExperimentStore
    experiment_id: str
    connections: Connections | None
    links: LinkBack | None = None
    mask: Callable[[str], str] | None = None
    reads: tuple[str, ...] = TRACKED_ATTRS

    def trial_env(self, storage_id: int, attrs: Mapping[str, Any]) -> dict[str, str]:
        """The environment telling trial ``storage_id`` its MLflow run; {} when the experiment
        is not tracked from here or MLflow did not make the run in time."""
        tracking = open_tracking(
            self.store, self.experiment_id, self.connections, timeout=TRIAL_REQUEST_TIMEOUT, attrs=attrs
        )
        return tracking.trial_env(storage_id, self.links, self.mask, attrs) if tracking is not None else {}

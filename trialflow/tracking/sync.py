"""Bring an experiment's MLflow runs level with the store: the reconciler of tracking.

Every pass reads what the store holds of the experiment (each trial's parameters, curve, final
result, status and times), compares it with what the outbox says MLflow already has, and sends
only the difference: a run made where missing (found by its tag first: a make whose answer was
lost), parameters once, the intermediate steps after the last one sent, the final result once,
the tags when they changed (its status, the best mark), and the run ended once it ended. The
outbox row moves after each call that arrived, so a pass cut short (the server went away, the
deadline came) loses nothing and repeats nothing.

Who calls it decides when (trialflow.tracking.runner): the run's watch every few seconds, the
end step once more, a trial's start for its own run, ``trialflow sync-mlflow``. A server that is
down makes a pass end early with what could not be sent counted (``SyncReport.pending``); the
experiment's history says it once when it goes away and once when it is back.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from trialflow.config.redaction import mask_text
from trialflow.steering.base import record_action
from trialflow.store.experiment_store import ExperimentStore, TrialHistory
from trialflow.store.pareto import pareto_rows, with_values
from trialflow.store.results import TrialRow, best_row, finite_or_none, objective_values, scalar
from trialflow.tracking.content import (
    BEST_TAG,
    EXPERIMENT_KEY,
    ORIGIN_ADDED,
    ORIGIN_NNI,
    ORIGIN_RERUN,
    ORIGIN_TUNER,
    ORIGIN_WARM_START,
    Batch,
    ExperimentFacts,
    LinkBack,
    TaskIdentity,
    TrialFacts,
    batches,
    experiment_params,
    experiment_tags,
    final_metrics,
    step_metrics,
    trial_params,
    trial_tags,
)
from trialflow.tracking.mlflow_rest import TrackingUnavailable
from trialflow.tracking.outbox import AGAIN, SYNC_KEY, Outbox, OutboxRow, Sent

#: The experiment attribute that says the tracking server is away (since when, and why), so the
#: history says so once per outage, not once per pass.
AWAY_ATTR = "tracking_away"
#: Who the history names for tracking's own lines.
TRACKER = "trialflow (MLflow)"


class TrackingClient(Protocol):
    """What a pass asks of a tracking server (trialflow.tracking.mlflow_rest.MlflowRest)."""

    def experiment_id(self, name: str) -> str: ...
    def find_run(self, experiment_id: str, key: str) -> str | None: ...
    def create_run(self, experiment_id: str, start_ms: int, tags: Mapping[str, str]) -> str: ...
    def log(self, run_id: str, batch: Batch) -> None: ...
    def end(self, run_id: str, status: str, end_ms: int | None) -> None: ...
    def delete_tag(self, run_id: str, key: str) -> None: ...
    def run_url(self, experiment_id: str, run_id: str) -> str: ...
    def run_artifact_uri(self, run_id: str) -> str: ...
    def upload(self, artifact_uri: str, path: str, data: bytes) -> None: ...
    def registered_model(self, name: str) -> None: ...
    def model_version(self, name: str, source: str, run_id: str, tags: Mapping[str, str], description: str) -> str: ...
    def model_versions(self, name: str, run_id: str) -> list[dict[str, Any]]: ...


@dataclass(frozen=True)
class Tracked:
    """The experiment as tracking needs it (trialflow.tracking.runner builds it)."""

    experiment_id: str
    mlflow_experiment: str
    facts: ExperimentFacts
    optimize_mode: str
    objectives: list[dict[str, str]] | None = None
    platforms: tuple[str, ...] = ()
    #: The experiment's artifact store URL (no credentials), where it keeps files.
    artifacts: str | None = None
    links: LinkBack = field(default_factory=LinkBack)
    #: What masks secrets in a value before it leaves (the config's masker, and Airflow's
    #: where it runs).
    mask: Callable[[str], str] = mask_text


@dataclass(frozen=True)
class SyncReport:
    """What one pass did."""

    #: False: another process was making a pass over the experiment; this one made none.
    passed: bool = True
    #: Runs that received something.
    sent: int = 0
    #: Runs with something still to send (the server went away, or the deadline came).
    pending: int = 0
    error: str | None = None
    #: Seconds the pass spent reading the store (what every pass pays, sending or not).
    read_seconds: float = 0.0


#: A pass's spacing is this many times what the next pass will cost again (see pass_spacing).
SPACING_FACTOR = 10.0


def pass_spacing(report: SyncReport | None, took: float, floor: float) -> float:
    """Seconds from one pass's start to the next's: ``floor``, or ten times what a pass costs
    every time (its read of the store, and one request's share of its wall time ``took``),
    so tracking keeps to a tenth of its process however large the experiment, and a server
    that answers slowly is asked less often. Not ten times the whole pass: a pass that sent a
    dozen runs took 9 s, the next came 90 s later, and an outage meanwhile was first said 90 s
    after the server went away (issue 64, 2)."""
    if report is None:  # the pass failed before it could say (the store busy): its whole time
        return max(floor, SPACING_FACTOR * max(took, 0.0))
    read = min(max(report.read_seconds, 0.0), max(took, 0.0))
    per_request = (max(took, 0.0) - read) / (report.sent + 1)
    return max(floor, SPACING_FACTOR * (read + per_request))


def origin(history: TrialHistory) -> str:
    if history.prior_of is not None:
        return ORIGIN_WARM_START
    if history.imported:
        return ORIGIN_NNI
    if history.asked_by:
        return ORIGIN_RERUN if history.asked_by.get("rerun_of") is not None else ORIGIN_ADDED
    return ORIGIN_TUNER


def facts_of(history: TrialHistory, tracked: Tracked) -> TrialFacts:
    key = str(history.trial_index) if history.trial_index is not None else f"prior:{history.storage_id}"
    platform = None
    if tracked.platforms:
        index = history.service_index if history.service_index is not None else 0
        platform = tracked.platforms[index] if 0 <= index < len(tracked.platforms) else None
    files = None
    if tracked.artifacts and history.trial_index is not None:
        files = f"{tracked.artifacts.rstrip('/')}/{tracked.experiment_id}/{history.trial_id}"
    return TrialFacts(
        run_key=key,
        trial_id=history.trial_id,
        trial_index=history.trial_index,
        parameters=history.parameters,
        status=history.status,
        finished=history.finished,
        started_at=history.started_at,
        ended_at=history.ended_at,
        intermediate=history.intermediate,
        final=history.final,
        origin=origin(history),
        task=TaskIdentity.from_attr(history.task),
        platform=None if history.prior_of else platform,
        artifacts=files,
        storage_id=history.storage_id,
    )


def best_keys(histories: list[TrialHistory], tracked: Tracked) -> frozenset[str]:
    """The trials tagged best: the best by the final result, or the Pareto set."""
    rows = [
        TrialRow(
            trial_index=h.trial_index,
            trial_id=h.trial_id,
            parameters=h.parameters,
            status=h.status,
            final_metric=finite_or_none(scalar(h.final)),
            final_metric_raw=h.final,
            final_extra={},
            # several objectives: the final dict's values in objective order, as the store closed it
            objective_values=objective_values(h.final, tracked.objectives)[0] if tracked.objectives else None,
            intermediate_count=len(h.intermediate),
            message=None,
        )
        for h in histories
        if h.trial_index is not None
    ]
    if tracked.objectives:
        chosen = pareto_rows(with_values(rows, tracked.objectives), tracked.objectives)
    else:
        best = best_row(rows, tracked.optimize_mode)
        chosen = [best] if best is not None else []
    return frozenset(str(r.trial_index) for r in chosen)


def _digest(tags: Mapping[str, str]) -> str:
    return hashlib.sha1(json.dumps(sorted(tags.items())).encode()).hexdigest()[:16]


class TrackingPass:
    """One pass over one experiment (see module)."""

    def __init__(
        self,
        tracked: Tracked,
        client: TrackingClient,
        outbox: Outbox,
        result_times: Callable[[int, int], Mapping[int, float]] | None = None,
    ):
        self.tracked, self.client, self.outbox = tracked, client, outbox
        #: When a trial's results after a step reached the store (ExperimentStore.result_times).
        self.result_times = result_times
        self.sent = 0

    def run_for(self, row: OutboxRow | None, key: str, start_ms: int, tags: Mapping[str, str], mlflow_id: str) -> str:
        """The row's MLflow run: the one recorded, one found by its tag, or one made now."""
        if row is not None and row.run_id:
            return row.run_id
        claimed = self.outbox.claim(key)
        if claimed is None:
            raise RunBeingMade(key)
        try:  # a run made before may have lost its answer: found by its tag, unless nobody ever tried
            found = self.client.find_run(mlflow_id, tags["trialflow.key"]) if claimed == AGAIN else None
            run_id = found or self.client.create_run(mlflow_id, start_ms, tags)
        except BaseException:
            self.outbox.release(key)
            raise
        self.outbox.made(key, run_id, self.client.run_url(mlflow_id, run_id))
        return run_id

    def send(self, run_id: str, key: str, sent: Sent, batch_list: list[Batch], **after: object) -> Sent:
        for batch in batch_list:
            self.client.log(run_id, batch)
        sent = sent.with_(**after)
        self.outbox.sent(key, sent)
        return sent

    def experiment_run(self, rows: dict[str, OutboxRow], mlflow_id: str, best: list[TrialFacts]) -> str:
        tracked, mask = self.tracked, self.tracked.mask
        tags = experiment_tags(tracked.facts, mask, [f.trial_id for f in best])
        row = rows.get(EXPERIMENT_KEY)
        run_id = self.run_for(row, EXPERIMENT_KEY, int(time.time() * 1000), tags, mlflow_id)
        sent = row.sent if row is not None else Sent()
        if not sent.params or sent.tags != _digest(tags):
            sent = self.send(
                run_id,
                EXPERIMENT_KEY,
                sent,
                batches(params=experiment_params(tracked.facts, mask), tags=tags),
                params=True,
                tags=_digest(tags),
                experiment=mlflow_id,
            )
            self.sent += 1
        status = tracked.facts.status
        if status and sent.ended != status:  # None: whoever passes leaves the status as it is
            self.client.end(run_id, status, None if status == "RUNNING" else int(time.time() * 1000))
            self.outbox.sent(EXPERIMENT_KEY, sent.with_(ended=status))
        return run_id

    def trial_run(
        self, facts: TrialFacts, row: OutboxRow | None, parent: str, mlflow_id: str, best: bool | None = None
    ) -> tuple[str, dict[str, str]]:
        """The trial's MLflow run (recorded, found by its tag, or made now) and the tags it is to
        carry (``best`` None: not known yet, as when a trial is about to start; the next pass
        adds the mark)."""
        tracked = self.tracked
        tags = trial_tags(facts, tracked.experiment_id, parent, tracked.links, tracked.mask)
        if best is not None:
            tags[BEST_TAG] = "true" if best else "false"
        start_ms = int((facts.started_at or time.time()) * 1000)
        return self.run_for(row, facts.run_key, start_ms, tags, mlflow_id), tags

    def parent(self, rows: dict[str, OutboxRow]) -> tuple[str, str]:
        """The MLflow experiment's id and the experiment's run, with one request at most once
        a pass has made that run (the outbox keeps both)."""
        made = rows.get(EXPERIMENT_KEY)
        if made is not None and made.run_id and made.sent.experiment:
            return made.sent.experiment, made.run_id
        mlflow_id = self.client.experiment_id(self.tracked.mlflow_experiment)
        return mlflow_id, self.experiment_run(rows, mlflow_id, [])

    def trial(
        self, facts: TrialFacts, row: OutboxRow | None, parent: str, best: bool, mlflow_id: str, ended_run: bool
    ) -> bool:
        """Send what the trial's run lacks; True when nothing is left to send for it."""
        mask = self.tracked.mask
        run_id, tags = self.trial_run(facts, row, parent, mlflow_id, best)
        sent = row.sent if row is not None else Sent()
        before = sent
        if not sent.params:
            sent = self.send(run_id, facts.run_key, sent, batches(params=trial_params(facts, mask)), params=True)
        reported = None
        if self.result_times is not None and facts.storage_id is not None and facts.intermediate:
            if max(facts.intermediate) > sent.last_step:  # a query only where a step is to go
                reported = self.result_times(facts.storage_id, sent.last_step)
        steps = step_metrics(facts, sent.last_step, reported)
        if steps:
            sent = self.send(run_id, facts.run_key, sent, batches(metrics=steps), last_step=steps[-1].step)
        if facts.finished and not sent.final:
            sent = self.send(run_id, facts.run_key, sent, batches(metrics=final_metrics(facts)), final=True)
        if sent.tags != _digest(tags):
            sent = self.send(
                run_id, facts.run_key, sent, batches(tags=tags), tags=_digest(tags), status=facts.status, best=best
            )
        if facts.ended and sent.ended != facts.mlflow_status:
            end_ms = int(facts.ended_at * 1000) if facts.ended_at else None
            self.client.end(run_id, facts.mlflow_status, end_ms)
            sent = sent.with_(ended=facts.mlflow_status)
            self.outbox.sent(facts.run_key, sent)
        if sent != before:
            self.sent += 1
        return facts.ended or (ended_run and facts.finished)


class RunBeingMade(Exception):
    """Another process is making this row's run right now: the next pass sends it."""


def sync_experiment(
    store: ExperimentStore, tracked: Tracked, client: TrackingClient, deadline: float | None = None
) -> SyncReport:
    """One pass (see module): bring the experiment's MLflow runs level with the store, until
    ``deadline`` (time.monotonic()) at most."""
    limit = deadline if deadline is not None else time.monotonic() + 60.0
    outbox = Outbox(store.engine, store.study_id(tracked.experiment_id))
    if not outbox.claim(SYNC_KEY):
        return SyncReport(passed=False)
    try:
        return _sync(store, tracked, client, outbox, limit)
    finally:
        outbox.release(SYNC_KEY)


def _sync(
    store: ExperimentStore, tracked: Tracked, client: TrackingClient, outbox: Outbox, deadline: float
) -> SyncReport:
    reading = time.monotonic()
    histories = store.trial_histories(tracked.experiment_id)
    rows = outbox.rows()
    best = best_keys(histories, tracked)
    work = TrackingPass(tracked, client, outbox, store.result_times)
    facts = [facts_of(h, tracked) for h in histories]
    left = [f for f in facts if not _level(f, rows.get(f.run_key), f.run_key in best)]
    read_seconds = time.monotonic() - reading
    error: str | None = None
    try:
        mlflow_id = client.experiment_id(tracked.mlflow_experiment)
        parent = work.experiment_run(rows, mlflow_id, [f for f in facts if f.run_key in best])
        while left and time.monotonic() < deadline:
            one = left[0]
            try:
                work.trial(one, rows.get(one.run_key), parent, one.run_key in best, mlflow_id, False)
            except RunBeingMade:
                pass
            left.pop(0)
        pending = len(left)
    except TrackingUnavailable as exc:
        error = tracked.mask(str(exc))
        pending = len(left) or 1
    _say_away_or_back(store, tracked.experiment_id, error, work.sent, pending)
    return SyncReport(
        passed=True, sent=work.sent, pending=pending if error or left else 0, error=error, read_seconds=read_seconds
    )


def _level(facts: TrialFacts, row: OutboxRow | None, best: bool) -> bool:
    """Nothing of the trial is left to send (cheap: read before any tag is built)."""
    if row is None or not row.run_id:
        return False
    sent = row.sent
    return (
        sent.params
        and (not facts.intermediate or max(facts.intermediate) <= sent.last_step)
        and (not facts.finished or sent.final)
        and (not facts.ended or sent.ended == facts.mlflow_status)
        and sent.status == facts.status
        and sent.best == best
    )


def say_away(store: ExperimentStore, experiment_id: str, error: str, action: str = "MLflow unreachable") -> None:
    """Record that the experiment's results do not reach MLflow, and why (once per outage: the
    pages show it while it lasts, the history keeps when it began); the next pass that reaches
    the server says it is back."""
    if store.experiment_attr(experiment_id, AWAY_ATTR):
        return
    store.set_experiment_attrs(experiment_id, {AWAY_ATTR: {"since": time.time(), "error": error[:500]}})
    record_action(
        store, experiment_id, TRACKER, action, f"{error[:300]}; what it did not get is kept and sent when it answers"
    )


def _say_away_or_back(store: ExperimentStore, experiment_id: str, error: str | None, sent: int, pending: int) -> None:
    """The history says when the server went away (once per outage) and when it came back."""
    away = store.experiment_attr(experiment_id, AWAY_ATTR)
    if error and not away:
        say_away(store, experiment_id, error)
    elif not error and away:
        store.set_experiment_attrs(experiment_id, {AWAY_ATTR: None})
        since = away.get("since") if isinstance(away, dict) else None
        for_how_long = f" after {time.time() - since:.0f} s" if isinstance(since, (int, float)) else ""
        record_action(
            store,
            experiment_id,
            TRACKER,
            "MLflow back",
            f"answering again{for_how_long}: {sent} run(s) brought up to date",
        )

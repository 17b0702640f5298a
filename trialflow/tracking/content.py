"""What a trial's MLflow run holds, built from what the store says of the trial: pure, no MLflow.

MLflow refuses a whole batch for one name it does not like (a parameter ``lr@2``, a key of 300
characters, a value of 7,000) and a trial's parameters are whatever its search space and its
author chose, so every name and value is made one MLflow accepts here, before anything is sent:
names keep MLflow's characters (the others become ``_``), lose the path segments MLflow reads
as files (``..``, ``.``, a leading ``/``) and are cut to MLflow's length with a digest that
keeps two long names apart; values are cut to MLflow's length with the cut said. Secrets in a
value (``token=...``, ``user:pass@``) are masked by the caller's mask before they are cut.

The limits are MLflow 3's (mlflow.utils.validation); a test compares them with the installed
MLflow's, so a change there fails here, not against a server.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

#: MLflow's limits (mlflow.utils.validation).
MAX_KEY = 250
MAX_PARAM_VALUE = 6000
MAX_TAG_VALUE = 8000
MAX_PARAMS_TAGS_PER_BATCH = 100
MAX_METRICS_PER_BATCH = 1000
#: Parameters logged per trial at most (MLflow keeps them all; a page of thousands helps no one).
MAX_PARAMS = 500

#: What MLflow lets a name hold besides letters and digits (colons are refused on Windows).
_NAME_CHARACTERS = re.compile(r"[^/\w.\- ]")
_CUT = "…"

#: NNI's statuses as MLflow's run statuses. Stopped trials of every kind are KILLED: MLflow has
#: no other ending that is neither a success nor an error; ``trialflow.status`` says which.
MLFLOW_STATUS: Mapping[str, str] = {
    "WAITING": "SCHEDULED",
    "RUNNING": "RUNNING",
    "SUCCEEDED": "FINISHED",
    "FAILED": "FAILED",
    "USER_CANCELED": "KILLED",
    "SYS_CANCELED": "KILLED",
    "EARLY_STOPPED": "KILLED",
}
TERMINAL_STATUSES = frozenset({"FINISHED", "FAILED", "KILLED"})

#: Where a trial's parameters came from, as its ``trialflow.origin`` tag says it.
ORIGIN_TUNER = "tuner"
ORIGIN_ADDED = "added by hand"
ORIGIN_RERUN = "re-run"
ORIGIN_NNI = "imported from NNI"
ORIGIN_WARM_START = "warm-start history"

#: The tag MLflow nests a run under its parent by, and the one trialflow finds its runs by.
PARENT_TAG = "mlflow.parentRunId"
KEY_TAG = "trialflow.key"
BEST_TAG = "trialflow.best"
#: Metric names: each intermediate result is a step of ``intermediate``; the final result is
#: ``final`` (a dict final's other keys: ``final/<key>``).
INTERMEDIATE = "intermediate"
FINAL = "final"


def mlflow_name(raw: str) -> str:
    """``raw`` as a name MLflow accepts for a parameter, metric or tag (see module)."""
    text = _NAME_CHARACTERS.sub("_", raw[: MAX_KEY * 4])
    parts = ["_" if part in (".", "..") else part for part in text.split("/") if part]
    name = "/".join(parts) or "_"
    if len(name) > MAX_KEY:  # cut, with a digest of the whole so two long names stay two
        digest = hashlib.sha1(raw.encode("utf-8", "surrogatepass")).hexdigest()[:8]
        name = name[: MAX_KEY - 9].rstrip("/") + "-" + digest
    return name


def bounded(value: str, limit: int) -> str:
    """``value`` cut to ``limit`` characters, the cut said by a trailing ellipsis."""
    return value if len(value) <= limit else value[: limit - len(_CUT)] + _CUT


def value_text(value: Any) -> str:
    """A parameter's value as MLflow shows it: strings as they are, others as JSON."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, sort_keys=True, default=str, allow_nan=True)
    except (TypeError, ValueError):
        return str(value)


def flat_parameters(parameters: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested choice's parameters as ``outer/inner`` names (NNI's nested search spaces)."""
    flat: dict[str, Any] = {}
    for key, value in parameters.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value and len(flat) < MAX_PARAMS:
            flat.update(flat_parameters(value, name + "/"))
        else:
            flat[name] = value
        if len(flat) >= MAX_PARAMS:
            break
    return flat


def named(pairs: Iterable[tuple[str, str]], limit: int) -> dict[str, str]:
    """Names made MLflow's and values bounded; two names that became one keep the first."""
    out: dict[str, str] = {}
    for raw, value in pairs:
        name = mlflow_name(raw)
        if name not in out:
            out[name] = bounded(value, limit)
    return out


@dataclass(frozen=True)
class TaskIdentity:
    """The Airflow task instance that ran a trial, as its start recorded it (the store's
    ``task`` attribute): what the run's tags link back to."""

    dag_id: str
    run_id: str
    task_id: str
    map_index: int
    try_number: int

    def to_attr(self) -> dict[str, Any]:
        return {
            "dag_id": self.dag_id,
            "run_id": self.run_id,
            "task_id": self.task_id,
            "map_index": self.map_index,
            "try_number": self.try_number,
        }

    @classmethod
    def from_attr(cls, raw: object) -> TaskIdentity | None:
        if not isinstance(raw, dict):
            return None
        try:
            return cls(
                str(raw["dag_id"]),
                str(raw["run_id"]),
                str(raw["task_id"]),
                int(raw["map_index"]),
                int(raw["try_number"]),
            )
        except (KeyError, TypeError, ValueError):
            return None


@dataclass(frozen=True)
class TrialFacts:
    """One trial as tracking reads it from the store (trialflow.tracking.reading)."""

    run_key: str
    trial_id: str
    trial_index: int | None
    parameters: Mapping[str, Any]
    status: str
    finished: bool
    started_at: float | None
    ended_at: float | None
    #: Intermediate results by step.
    intermediate: Mapping[int, float]
    final: Any
    origin: str
    task: TaskIdentity | None = None
    platform: str | None = None
    #: Where its checkpoints and artifacts are kept (a store URL without credentials), if any.
    artifacts: str | None = None
    #: Its trial in the store (to read when its results came: trialflow.tracking.sync).
    storage_id: int | None = None

    @property
    def mlflow_status(self) -> str:
        return MLFLOW_STATUS.get(self.status, "RUNNING")

    @property
    def ended(self) -> bool:
        return self.finished and self.mlflow_status in TERMINAL_STATUSES


@dataclass(frozen=True)
class Metric:
    key: str
    value: float
    step: int
    timestamp: int  # milliseconds


@dataclass(frozen=True)
class ExperimentFacts:
    """The experiment as its MLflow run shows it."""

    experiment_id: str
    name: str
    dag_id: str | None
    settings: Mapping[str, Any]
    page: str | None = None
    #: The MLflow status its run is to have: RUNNING while a DAG run drives it (the run's
    #: watch), FINISHED or FAILED from the end step; None (the command line): as it is.
    status: str | None = None


def base_time(facts: TrialFacts) -> int:
    """The milliseconds a trial's metrics are stamped from: its start, so a metric sent twice
    (a response lost after the server kept it) carries the same stamp and the server keeps one."""
    return int((facts.started_at or 0.0) * 1000)


def step_metrics(facts: TrialFacts, after: int, reported: Mapping[int, float] | None = None) -> list[Metric]:
    """The intermediate results of steps above ``after``, in step order, each stamped with the
    time it reached the store (``reported``, epoch seconds by step: the same stamp however
    often it is sent); a result stored before trialflow kept times gets the trial's start plus
    a millisecond a step. A value that is not a finite number is left out (MLflow keeps NaN and
    infinities; the store never holds them)."""
    start = base_time(facts)
    times = reported or {}
    return [
        Metric(INTERMEDIATE, float(value), int(step), _stamp(times.get(step), start + int(step)))
        for step, value in sorted(facts.intermediate.items())
        if step > after and math.isfinite(value)
    ]


def _stamp(seconds: float | None, otherwise: int) -> int:
    """Milliseconds since the epoch for a stored time, or ``otherwise`` where it has none (or
    one that is no time: the store is another writer's too)."""
    if seconds is None or not math.isfinite(seconds) or not 0 < seconds < 1e11:
        return otherwise
    return int(seconds * 1000)


def final_metrics(facts: TrialFacts) -> list[Metric]:
    """The final result as metrics: a number as ``final``; a dict's ``default`` as ``final``
    and its other numeric keys as ``final/<key>``."""
    final = facts.final
    stamp = int((facts.ended_at or facts.started_at or 0.0) * 1000)
    step = max(facts.intermediate, default=-1) + 1
    values: dict[str, float] = {}
    if isinstance(final, Mapping):
        for key, value in list(final.items())[:MAX_PARAMS]:
            number = _number(value)
            if number is not None:
                values[FINAL if key == "default" else mlflow_name(f"{FINAL}/{key}")] = number
    else:
        number = _number(final)
        if number is not None:
            values[FINAL] = number
    return [Metric(key, value, step, stamp) for key, value in values.items()]


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return number if math.isfinite(number) else None


def trial_params(facts: TrialFacts, mask: Callable[[str], str]) -> dict[str, str]:
    """Its parameters, named and bounded, secrets masked."""
    flat = flat_parameters(facts.parameters)
    return named(((key, mask(value_text(value))) for key, value in flat.items()), MAX_PARAM_VALUE)


@dataclass(frozen=True)
class LinkBack:
    """The trialflow pages a run links back to (the Airflow layer knows their addresses)."""

    experiment_page: str | None = None
    trial_page: Callable[[TaskIdentity], str] | None = None


def trial_tags(
    facts: TrialFacts, experiment_id: str, parent_run_id: str, links: LinkBack, mask: Callable[[str], str]
) -> dict[str, str]:
    """The tags linking a trial's run back to its experiment, its DAG, run, task and try, and
    its trialflow page; where its parameters came from; its NNI status; where its files are."""
    raw: dict[str, str | None] = {
        PARENT_TAG: parent_run_id,
        KEY_TAG: f"{experiment_id}/{facts.run_key}",
        # short in MLflow's run table: "trial 3" (its id is a tag), a warm start's prior by its source
        "mlflow.runName": f"trial {facts.trial_index}"
        if facts.trial_index is not None
        else f"{facts.origin}: {facts.trial_id}",
        "trialflow.experiment_id": experiment_id,
        "trialflow.trial_id": facts.trial_id,
        "trialflow.trial_index": None if facts.trial_index is None else str(facts.trial_index),
        "trialflow.origin": facts.origin,
        "trialflow.status": facts.status,
        "trialflow.platform": facts.platform,
        "trialflow.artifacts": facts.artifacts,
    }
    if facts.task is not None:
        raw.update(
            {
                "trialflow.dag_id": facts.task.dag_id,
                "trialflow.dag_run_id": facts.task.run_id,
                "trialflow.task_id": facts.task.task_id,
                "trialflow.map_index": str(facts.task.map_index),
                "trialflow.try_number": str(facts.task.try_number),
            }
        )
        if links.trial_page is not None:
            raw["trialflow.page"] = links.trial_page(facts.task)
    elif links.experiment_page:
        raw["trialflow.page"] = links.experiment_page
    return named(((k, mask(v)) for k, v in raw.items() if v is not None), MAX_TAG_VALUE)


def experiment_tags(
    facts: ExperimentFacts, mask: Callable[[str], str], best_trials: Iterable[str] = ()
) -> dict[str, str]:
    """The experiment's run's tags: what finds it, its name, DAG and page, and its best trial(s)."""
    chosen = sorted(best_trials)
    raw: dict[str, str | None] = {
        "trialflow.best_trial": ", ".join(chosen) if chosen else None,
        KEY_TAG: f"{facts.experiment_id}/{EXPERIMENT_KEY}",
        "mlflow.runName": facts.name,
        "trialflow.experiment_id": facts.experiment_id,
        "trialflow.dag_id": facts.dag_id,
        "trialflow.page": facts.page,
    }
    return named(((k, mask(v)) for k, v in raw.items() if v is not None), MAX_TAG_VALUE)


def experiment_params(facts: ExperimentFacts, mask: Callable[[str], str]) -> dict[str, str]:
    return named(((k, mask(value_text(v))) for k, v in facts.settings.items() if v is not None), MAX_PARAM_VALUE)


#: The experiment's own run's key in the outbox.
EXPERIMENT_KEY = "experiment"


@dataclass(frozen=True)
class Batch:
    """One log_batch call's worth (MLflow's per-call limits held)."""

    metrics: tuple[Metric, ...] = ()
    params: tuple[tuple[str, str], ...] = ()
    tags: tuple[tuple[str, str], ...] = ()


def batches(
    metrics: Iterable[Metric] = (), params: Mapping[str, str] | None = None, tags: Mapping[str, str] | None = None
) -> list[Batch]:
    """Metrics, parameters and tags in calls MLflow accepts: at most 1,000 metrics and 100
    parameters and tags together per call."""
    out: list[Batch] = []
    metric_list = list(metrics)
    for i in range(0, len(metric_list), MAX_METRICS_PER_BATCH):
        out.append(Batch(metrics=tuple(metric_list[i : i + MAX_METRICS_PER_BATCH])))
    pairs = [("p", kv) for kv in (params or {}).items()] + [("t", kv) for kv in (tags or {}).items()]
    for i in range(0, len(pairs), MAX_PARAMS_TAGS_PER_BATCH):
        chunk = pairs[i : i + MAX_PARAMS_TAGS_PER_BATCH]
        out.append(
            Batch(
                params=tuple(kv for kind, kv in chunk if kind == "p"),
                tags=tuple(kv for kind, kv in chunk if kind == "t"),
            )
        )
    return out

"""An NNI experiment (read whole by trialflow.nni_history) made a store experiment. No Airflow.

Every trial goes in through the store's own path for a person's trial (enqueue, then ask: the
tuner replays its parameters), so the imported experiment's study holds them as it holds its
own: the pages, `trialflow trials/export` and a tuner that learns from it read them alike.
Everything that can be refused is checked before anything is written (the search space, the
tuner, every trial's parameters against the space), and a write that fails half-way removes
what it wrote: an import is whole or absent. The experiment belongs to the DAG named at import
(its ``dag_id``), so the pages' permissions hold; it is marked imported with NNI's id.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trialflow.config.errors import ConfigError
from trialflow.config.model import AlgorithmConfig
from trialflow.config.redaction import redact
from trialflow.config.search_space import SearchSpace, SearchSpaceError, encode, parse_search_space
from trialflow.experiment import EXPERIMENT_ID
from trialflow.nni_history import NniExperiment, NniHistoryError
from trialflow.trial.protocol import Metric
from trialflow.trial.status import TrialStatus
from trialflow.tuning.asker import ask
from trialflow.tuning.pbt import FOLDER_KEYS

if TYPE_CHECKING:
    from trialflow.nni_history.database import NniTrial
    from trialflow.store.experiment_store import ExperimentStore

#: The experiment attribute that marks an imported experiment: {"nni_id", "source", "swapped"}.
IMPORTED_ATTR = "imported_from"
#: Who "asked for" an imported trial's parameters in the store: the import replays them
#: through the path of a person's trial, but NNI's tuner (or NNI's user) chose them; the
#: pages and exports read NNI's own parameter_source for it, never "added".
IMPORT_REQUESTER = "import"
#: An Airflow DAG id, as Airflow checks one (airflow.utils.helpers.validate_key: KEY_REGEX and
#: 250 characters): the experiment is listed and permitted under it.
DAG_ID = re.compile(r"[\w.-]{1,250}")
#: A trial attribute: the NNI trial job that ran it.
NNI_JOB_ATTR = "nni_trial_job_id"
_UNFINISHED = "was not finished when NNI stopped (imported as cancelled)"


@dataclass(frozen=True)
class Imported:
    """What an import made: the store experiment, its trials, and how many results NNI's events
    had filed under another parameter set (trialflow.nni_history)."""

    experiment_id: str
    trials: int
    swapped: int


def import_id(nni_id: str) -> str:
    """The store experiment an NNI experiment becomes (``nni-<its id>``, lowercase)."""
    name = "nni-" + re.sub(r"[^a-z0-9-]+", "-", nni_id.lower()).strip("-")
    if not EXPERIMENT_ID.fullmatch(name):
        raise NniHistoryError(f"NNI experiment id {nni_id[:40]!r} makes no experiment id; pass one")
    return name


def _checked(experiment: NniExperiment) -> tuple[SearchSpace, AlgorithmConfig, dict[str, Any]]:
    """The search space and tuner, every trial's parameters checked against the space, and the
    config in NNI v2's shape (a 1.x config's search space text and built-in names made v2's)."""
    config = experiment.config
    where = str(experiment.source)
    raw_space = config.get("searchSpace")
    if isinstance(raw_space, str):  # NNI 1.x kept the search space as JSON text
        try:
            raw_space = json.loads(raw_space)
        except (ValueError, RecursionError):
            raise NniHistoryError(f"{where}: ExperimentProfile.params.searchSpace: not JSON") from None
    try:
        space = parse_search_space(raw_space)
    except SearchSpaceError as exc:
        raise NniHistoryError(f"{where}: ExperimentProfile.params.searchSpace: {exc.message}") from None
    key = "tuner" if config.get("tuner") or not config.get("advisor") else "advisor"
    algorithm = _v2_algorithm(config.get(key) or {"name": "Random"})
    shaped = {**config, "searchSpace": raw_space, key: algorithm}
    try:
        tuner = AlgorithmConfig.model_validate(
            {k: v for k, v in algorithm.items() if k in ("name", "className", "classArgs", "codeDirectory")}
            if isinstance(algorithm, dict)
            else algorithm
        )
    except (ValueError, ConfigError) as exc:
        raise NniHistoryError(f"{where}: ExperimentProfile.params.tuner: {str(exc).splitlines()[0][:200]}") from None
    for trial in experiment.trials:
        if trial.parameters is None:
            continue
        try:
            encode(space, _tuned(trial.parameters, tuner))
        except SearchSpaceError as exc:
            raise NniHistoryError(
                f"{where}: trial {trial.trial_job_id}: its parameters do not fit the search space ({exc.message})"
            ) from None
    return space, tuner, shaped


def _v2_algorithm(algorithm: Any) -> Any:
    """NNI 1.x named a built-in ``builtinTunerName`` / ``builtinAdvisorName`` (v2: ``name``)."""
    if isinstance(algorithm, dict):
        for old in ("builtinTunerName", "builtinAdvisorName", "builtinAssessorName"):
            if old in algorithm and "name" not in algorithm:
                return {**{k: v for k, v in algorithm.items() if k != old}, "name": algorithm[old]}
    return algorithm


def import_experiment(
    store: ExperimentStore, experiment: NniExperiment, dag_id: str, experiment_id: str | None = None
) -> Imported:
    """Write ``experiment`` into the store as ``experiment_id`` (default ``nni-<NNI id>``) under
    DAG ``dag_id``; NniHistoryError when it cannot be (nothing is written then)."""
    target = import_target(experiment, dag_id, experiment_id)
    if store.experiment_exists(target):
        raise NniHistoryError(f"experiment {target!r} exists already (imported before?): nothing was changed")
    space, tuner, config = _checked(experiment)
    trials = [t for t in experiment.trials if t.parameters is not None]
    try:
        _write(store, experiment, target, dag_id, (space, tuner, config), trials)
    except BaseException:
        store.delete_experiment(target)  # whole or absent
        raise
    return Imported(target, len(trials), experiment.swapped)


def import_target(experiment: NniExperiment, dag_id: str, experiment_id: str | None = None) -> str:
    """The experiment id the import writes, once everything that needs no store is checked
    (the DAG id, the id, the search space, the tuner and every trial's parameters), so that
    `trialflow import-nni` refuses bad input before it creates a store file."""
    if not isinstance(dag_id, str) or not DAG_ID.fullmatch(dag_id):
        raise NniHistoryError(
            f"--dag {str(dag_id)[:80]!r}: not an Airflow DAG id (letters, digits, '_', '.' and '-', at most 250)"
        )
    target = experiment_id or import_id(experiment.experiment_id)
    if not EXPERIMENT_ID.fullmatch(target):
        raise NniHistoryError(f"experiment id {target[:70]!r}: expected lowercase letters, digits and '-'")
    _checked(experiment)
    return target


def _tuned(parameters: dict[str, Any], tuner: AlgorithmConfig) -> dict[str, Any]:
    """A trial's parameters as the store keeps them: NNI's PBTTuner also handed its trials the
    folders to load from and save to, paths on NNI's shared disk, which are no parameter of
    the space (trialflow gives them where a trial runs)."""
    if not tuner.population_based:
        return dict(parameters)
    return {k: v for k, v in parameters.items() if k not in FOLDER_KEYS}


def _write(
    store: ExperimentStore,
    experiment: NniExperiment,
    target: str,
    dag_id: str,
    checked: tuple[SearchSpace, AlgorithmConfig, dict[str, Any]],
    trials: list[Any],
) -> None:
    space, tuner, config = checked
    store.open_experiment(target, tuner.optimize_mode)
    store.set_experiment_attrs(
        target,
        {
            "experiment_name": config.get("experimentName") or f"NNI {experiment.experiment_id}",
            "dag_id": dag_id,
            "optimize_mode": tuner.optimize_mode,
            "config": redact(config),
            "platform": _platform(config),
            IMPORTED_ATTR: {
                "nni_id": experiment.experiment_id,
                "source": str(experiment.source),
                "started": experiment.started,
                "ended": experiment.ended,
                "swapped": experiment.swapped,
            },
        },
    )
    for index, trial in enumerate(trials):
        request = {"by": IMPORT_REQUESTER, "nni_trial_job_id": trial.trial_job_id}
        if trial.parameter_source:
            request["parameter_source"] = trial.parameter_source[:32]  # who chose them in NNI
        store.enqueue(target, _tuned(trial.parameters, tuner), request)
        asked = ask(store, target, index, f"{target}-{index:04d}", tuner, space)
        store.set_attrs(asked.storage_id, **{NNI_JOB_ATTR: trial.trial_job_id})
        metrics = [Metric("PERIODICAL", i, v) for i, v in enumerate(trial.intermediate)]
        if trial.final is not None:
            metrics.append(Metric("FINAL", 0, trial.final))
        skipped = store.record_metrics(asked.storage_id, metrics)
        status, message = _outcome(trial.status, trial.message)
        if skipped:
            message = "; ".join([*([message] if message else []), *skipped])
        store.close(asked.storage_id, status, message)
        store.set_trial_times(asked.storage_id, trial.started, ended_at(trial, experiment))


def ended_at(trial: NniTrial, experiment: NniExperiment) -> float | None:
    """When NNI last saw the trial: its end event; for a job still running when NNI stopped
    (no end event), the experiment's end (NNI's profile endTime), or else the job's last event
    or metric; None (unknown) when NNI recorded none of them. Never the import's own time
    (measured: a job with no end read 25 h 36 min where NNI's profile said 26.6 s)."""
    if trial.ended is not None:
        return trial.ended
    if experiment.ended is not None and (trial.started is None or experiment.ended >= trial.started):
        return experiment.ended
    return trial.last_seen


def _outcome(status: str, message: str | None) -> tuple[TrialStatus, str | None]:
    """NNI's end status as the trial's; one it had not reached (WAITING, RUNNING, UNKNOWN: the
    experiment was stopped) is a cancelled trial, saying so."""
    try:
        found = TrialStatus(status)
    except ValueError:
        return TrialStatus.SYS_CANCELED, _UNFINISHED
    return (found, message) if found.is_terminal else (TrialStatus.SYS_CANCELED, _UNFINISHED)


def _platform(config: dict[str, Any]) -> str | None:
    service = config.get("trainingService")
    first = service[0] if isinstance(service, list) and service else service
    return str(first.get("platform")) if isinstance(first, dict) and first.get("platform") else None

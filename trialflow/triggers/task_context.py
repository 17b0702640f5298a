"""What a trial task's start takes from Airflow's context, wherever the start runs: in a worker
(trialflow.operators.trial) or in the triggerer (trialflow.triggers.trial_start): the experiment
the DAG run drives, and where the trial is tracked. Here, below both shells, so they share it.

In the triggerer, where every trial of a run has a trigger, the store and the experiment are
the process's (``shared_store``, ``shared_experiment``): a thousand triggers made a thousand
engines and parsed the config a thousand times."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from trialflow.hooks import airflow_connections

if TYPE_CHECKING:
    from airflow.sdk import Context

    from trialflow.experiment import Experiment
    from trialflow.store.experiment_store import ExperimentStore


class TriggerContext(Mapping[str, Any]):
    """A trial task's context in the triggerer, built only as far as it is read.

    A trial's start reads four of its values (its task instance, DAG, run id and DAG run: the
    experiment and tracking above). Airflow's ``get_template_context`` builds every key and
    validates the DAG's params against the run's conf each time, about 4 % of the triggerer
    runner's samples, on its one event loop, for every trial (bench/RESULTS.md, tenth pass); a
    run's trials share one conf, and the start that loads the run's experiment reads the whole
    context (any other key builds it), so its params are validated where they were."""

    CHEAP = frozenset({"ti", "task_instance", "dag", "run_id", "dag_run"})

    def __init__(self, ti: Any):
        self._ti = ti
        self._full: Mapping[str, Any] | None = None

    def whole(self) -> Mapping[str, Any]:
        """Airflow's whole template context (its params validated against the run's conf)."""
        if self._full is None:
            self._full = self._ti.get_template_context()
        return self._full

    def __getitem__(self, key: str) -> Any:
        if self._full is None and key in self.CHEAP:
            ti = self._ti
            if key in ("ti", "task_instance"):
                return ti
            if key == "dag":
                return ti.task.dag
            if key == "run_id":
                return ti.run_id
            # what get_template_context gives as dag_run; not a public attribute of the runtime
            # task instance, so where it is missing the whole context answers
            dag_run = getattr(getattr(ti, "_ti_context_from_server", None), "dag_run", None)
            if dag_run is not None:
                return dag_run
        return self.whole()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.whole())

    def __len__(self) -> int:
        return len(self.whole())


def experiment_for(config_path: str, context: Context, check: bool = False, group: str | None = None) -> Experiment:
    """The experiment this DAG run drives (a run's conf may name another: ``experiment_id``);
    ``group``: the task group it belongs to, in a DAG that may hold several. Trial tasks only
    load the config; DAG parsing and the start step checked it in full."""
    from trialflow.experiment import Experiment

    conf = getattr(context.get("dag_run"), "conf", None) or {}
    return Experiment.for_run(
        config_path, context["dag"].dag_id, context["run_id"], conf=conf, check=check, group=group
    )


def tracking_for(experiment: Any, context: Context, store: ExperimentStore) -> dict[str, Any]:
    """What a trial's MLflow run links back to: the task instance, the pages, Airflow's masker
    (only for an experiment that names MLflow)."""
    if experiment.config.mlflow is None:
        return {}
    from trialflow.from_airflow.secrets import masked_text
    from trialflow.tracking.content import TaskIdentity
    from trialflow.tracking.runner import TrialStartTracking
    from trialflow.ui.links import tracking_links

    ti = context["ti"]
    task = TaskIdentity(
        ti.dag_id, ti.run_id, ti.task_id, int(ti.map_index if ti.map_index is not None else -1), int(ti.try_number)
    )
    links = tracking_links(experiment.experiment_id)
    tracking = TrialStartTracking(store, experiment.experiment_id, airflow_connections(), links, masked_text)
    return {"task": task, "tracking": tracking}


#: The most experiments and stores a triggerer keeps (runs at once, stores named).
_KEPT = 64
#: Seconds a store connection, once resolved, stands for its store in this process.
CONNECTION_SECONDS = 30.0
_LOCK = threading.Lock()
#: Held while a connection is looked up, so threads that find it missing together wait for one.
_RESOLVING = threading.Lock()
_STORES: dict[str, ExperimentStore] = {}
_URLS: dict[tuple[str, str | None], tuple[str, float]] = {}
_EXPERIMENTS: dict[tuple[Any, ...], Experiment] = {}


def shared_store(conn_id: str) -> ExperimentStore:
    """The store of connection ``conn_id``, one per store URL in this process (an engine, its
    pool and the study ids it learnt). The connection is resolved again after
    CONNECTION_SECONDS (one in the environment, when its text changes): a changed one is a new
    store from then on. Not each time: in the
    triggerer a lookup is a round trip to its supervisor, and each of the connection's secrets
    another (masking), one at a time for every trigger; with a thousand short trials, resolving
    it at every start and follow kept the supervisor at 65 % of a core and the starts waiting
    on it (bench/RESULTS.md). Threads that find it missing together (a run's first fifty
    starts, and again when its time is up) wait for one lookup."""
    from trialflow.hooks.experiment_store import ExperimentStoreHook
    from trialflow.store.experiment_store import ExperimentStore

    # A connection defined in the environment is read there for nothing: its text is part of
    # the key, so a changed one is a new store at once.
    key = (conn_id, os.environ.get(f"AIRFLOW_CONN_{conn_id.upper()}"))

    def known() -> str | None:
        with _LOCK:
            found = _URLS.get(key)
        return found[0] if found is not None and time.monotonic() - found[1] < CONNECTION_SECONDS else None

    url = known()
    if url is None:
        with _RESOLVING:  # one lookup for the starts that all found it missing (fifty at once)
            url = known()
            if url is None:
                url = ExperimentStoreHook(conn_id).storage_url()
                with _LOCK:
                    if key not in _URLS and len(_URLS) >= _KEPT:
                        _URLS.pop(next(iter(_URLS)))
                    _URLS[key] = (url, time.monotonic())
    with _LOCK:
        store = _STORES.get(url)
        if store is None:
            if len(_STORES) >= _KEPT:
                _STORES.pop(next(iter(_STORES)))
            store = _STORES[url] = ExperimentStore(url)
        return store


def shared_experiment(config_path: str, context: Context, group: str | None = None) -> Experiment:
    """``experiment_for``, kept per config file (as it is now: its size and mtime), DAG run, run
    conf and group, so the triggers of one run load the config once."""
    try:
        stat = os.stat(config_path)
    except OSError:  # not a file of its own (an inline config): loaded each time
        if isinstance(context, TriggerContext):
            context.whole()
        return experiment_for(config_path, context, group=group)
    conf = getattr(context.get("dag_run"), "conf", None) or {}
    key = (
        config_path,
        stat.st_mtime_ns,
        stat.st_size,
        context["dag"].dag_id,
        context["run_id"],
        json.dumps(conf, sort_keys=True, default=str),
        group,
    )
    with _LOCK:
        found = _EXPERIMENTS.get(key)
    if found is None:
        if isinstance(context, TriggerContext):
            context.whole()  # the run's params checked against its conf, as a worker's start checks them
        found = experiment_for(config_path, context, group=group)
        with _LOCK:
            if len(_EXPERIMENTS) >= _KEPT:
                _EXPERIMENTS.pop(next(iter(_EXPERIMENTS)))
            _EXPERIMENTS[key] = found
    return found

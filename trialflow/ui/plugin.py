"""The trialflow Airflow plugin (registered under the ``airflow.plugins`` entry point).

* ``fastapi_apps``: the pages' data (trialflow/ui/api.py), mounted at ``/trialflow`` on the
  api-server, every data route behind Airflow's login and DAG permissions;
* ``react_apps``: the pages (the committed bundle built from ui/), in Airflow's navigation
  ("Experiments"), as a tab of each DAG ("Experiments": its runs' experiments) and of each DAG
  run ("Experiment": the run's experiment);
* extra links on trial tasks: "Trial" (its page) and "Platform" (its job's page, when the
  config gives ``trialWebUrl``);
* with ``[trialflow] preload_core = True``, trialflow's core imported once per component
  (see ``preload_core``).
"""

from __future__ import annotations

import logging

from airflow.plugins_manager import AirflowPlugin

from trialflow.ui.clears import ClearedTrials
from trialflow.ui.links import PlatformLink, TrialLink

#: Relative to Airflow's base URL (the UI resolves it against <base href>): works under a prefix.
BUNDLE_URL = "trialflow/static/trialflow.js"
log = logging.getLogger(__name__)
ICON_URL = "trialflow/static/experiments.svg"


#: The trial operators, as Airflow matches a plugin's link to a serialized task: by its class's
#: name and module (a mapped task: by name). Named, not imported: the operators import the UI's
#: links, and the UI lies below them (tests/ui check these are the classes' own).
TRIAL_OPERATORS = tuple(
    type(name, (), {"__module__": "trialflow.operators.trial"})
    for name in ("SubmitTrialOperator", "TriggeredTrialOperator")
)


class TrialPageLink(TrialLink):
    """The "Trial" link made where it is asked for (the api-server), for both trial operators:
    it needs only the task instance's key. Airflow keeps an operator's own links from the worker
    that ran it, and a trial task started in the triggerer never runs in one."""

    operators = list(TRIAL_OPERATORS)


#: What a trial task imports and sets up before its first line of work: the core, Optuna and its
#: samplers, SQLAlchemy's ORM mapping of Optuna's tables, the local platform, and what parsing the
#: experiment's DAG file and deferring need. numpy.random is imported by Optuna's samplers at
#: their first draw, not with Optuna (NumPy's lazy submodules).
PRELOADED = (
    "trialflow.dag",
    "trialflow.lifecycle.trial_lifecycle",
    "trialflow.store.experiment_store",
    "trialflow.tuning.tuners",
    "trialflow.tuning.assessors",
    "trialflow.operators.trial",
    "trialflow.triggers.trial",
    "trialflow.platforms.local",
    "numpy.random",
)


#: What a tuner imports at its first ask, for ``[trialflow] preload_tuners``: GP's scikit-learn
#: is ~0.7 s of every GP trial task's ask and +75 MB of resident memory (measured), too heavy
#: to preload for everyone.
TUNER_IMPORTS = {"GP": ("sklearn.gaussian_process", "sklearn.gaussian_process.kernels")}


def preload_core() -> bool:
    """Import trialflow's core in this process when ``[trialflow] preload_core`` says so.

    Airflow starts a task by forking (on Linux: the LocalExecutor's workers are forks of the
    scheduler, each task a fork of a worker; Celery's pool and Airflow's supervisor fork
    likewise). What the forking process has imported, every task has for free, so with
    Airflow's ``[core] lazy_load_plugins = False`` (every component loads plugins as it
    starts) and this option on, a trial task no longer imports Optuna, SQLAlchemy's ORM and
    the config models itself (~0.5 s of CPU each, bench/RESULTS.md), and the forked tasks
    share those pages instead of each holding a copy. Off by default: it adds that import to
    every Airflow component's start. ``trialflow run`` turns it on."""
    from airflow.configuration import conf

    if not conf.getboolean("trialflow", "preload_core", fallback=False):
        return False
    import importlib

    import sqlalchemy.orm

    from trialflow.config.loader import experiment_model

    for name in PRELOADED:
        importlib.import_module(name)
    sqlalchemy.orm.configure_mappers()  # Optuna's models: ~25 ms at a process's first query
    experiment_model()  # the config model over every registered platform (reads entry points)
    for tuner in filter(None, (t.strip() for t in conf.get("trialflow", "preload_tuners", fallback="").split(","))):
        if tuner not in TUNER_IMPORTS:
            log.warning(
                "[trialflow] preload_tuners: %r has nothing to preload (known: %s); ignored",
                tuner,
                ", ".join(TUNER_IMPORTS),
            )
            continue
        try:
            for name in TUNER_IMPORTS[tuner]:
                importlib.import_module(name)
        except ImportError as exc:  # the extra is not installed: said here, and again by the ask
            log.warning("[trialflow] preload_tuners: %s not preloaded: %s", tuner, exc)
    return True


preload_core()


def _listeners() -> list:
    """trialflow.ui.listener, in the api-server only: a listener plugin loaded by the
    dag-processor would make Airflow refuse every other DAG's tasks with end_from_trigger=True.
    The api-server is ``airflow api-server`` (its workers, forked or spawned, keep that argv);
    AIRFLOW_API_APPS, which Airflow sets while it serves, is set only after plugins may have
    loaded."""
    import os
    import sys

    if not ({"api-server", "api_server"} & set(sys.argv[1:3]) or "AIRFLOW_API_APPS" in os.environ):
        return []
    from trialflow.ui import listener

    return [listener]


def _fastapi_apps() -> list[dict]:
    from trialflow.ui.api import app

    return [{"app": app, "url_prefix": "/trialflow", "name": "trialflow"}] if app is not None else []


class TrialflowPlugin(AirflowPlugin):
    name = "trialflow"
    fastapi_apps = _fastapi_apps()
    react_apps = [
        {
            "name": "Experiments",
            "bundle_url": BUNDLE_URL,
            "destination": "nav",
            "url_route": "trialflow",
            "nav_top_level": True,
            "icon": ICON_URL,
        },
        {"name": "Trialflow experiments", "bundle_url": BUNDLE_URL, "destination": "dag", "url_route": "trialflow-dag"},
        {"name": "Experiment", "bundle_url": BUNDLE_URL, "destination": "dag_run", "url_route": "trialflow-run"},
    ]
    operator_extra_links = [TrialPageLink(), PlatformLink()]
    listeners = _listeners()
    # A clear of a trial task writes its trial's stop request (trialflow.ui.clears): the api-server's.
    fastapi_root_middlewares = [{"middleware": ClearedTrials, "name": "trialflow: cleared trials"}]

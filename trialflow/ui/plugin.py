"""The trialflow Airflow plugin (registered under the ``airflow.plugins`` entry point).

* ``fastapi_apps``: the pages' data (trialflow/ui/api.py), mounted at ``/trialflow`` on the
  api-server, every data route behind Airflow's login and DAG permissions;
* ``react_apps``: the pages (the committed bundle built from ui/), in Airflow's navigation
  ("Experiments"), as a tab of each DAG ("Experiments": its runs' experiments) and of each DAG
  run ("Experiment": the run's experiment);
* extra links on trial tasks: "Trial" (its page) and "Platform" (its job's page, when the
  config gives ``trialWebUrl``).
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from trialflow.ui.links import PlatformLink, TrialLink

#: Relative to Airflow's base URL (the UI resolves it against <base href>): works under a prefix.
BUNDLE_URL = "trialflow/static/trialflow.js"
ICON_URL = "trialflow/static/experiments.svg"


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
    operator_extra_links = [TrialLink(), PlatformLink()]

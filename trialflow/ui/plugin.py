"""The trialflow Airflow plugin (registered under the ``airflow.plugins`` entry point).

Experiment pages and platform links grow here; for now it makes trialflow's
presence visible in ``airflow plugins`` and the UI's plugin list.
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin


class TrialflowPlugin(AirflowPlugin):
    name = "trialflow"

"""Extra links on a trial's task instance: its trialflow page, and its job on the platform.

Airflow evaluates links in the worker after each attempt (including one that deferred) and keeps
them, so they show while the trial is still running.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from airflow.sdk import BaseOperatorLink

if TYPE_CHECKING:
    from airflow.sdk.types import TaskInstanceKey

#: XCom key under which the trial task pushes its platform page (from trialWebUrl).
PLATFORM_URL_KEY = "trialflow_platform_url"


def base_url() -> str:
    """Airflow's base path (``[api] base_url`` may carry a prefix), ending in a slash."""
    from airflow.configuration import conf

    base = conf.get("api", "base_url", fallback="/") or "/"
    if "://" in base:
        rest = base.split("://", 1)[1]
        base = "/" + rest.split("/", 1)[1] if "/" in rest else "/"
    return base.rstrip("/") + "/"


def trial_page(dag_id: str, run_id: str, map_index: int, task_id: str | None = None) -> str:
    """The page resolves the run, task and map index to its experiment and trial (the task id
    tells a DAG's experiment task groups apart)."""
    query: dict[str, Any] = {"dag_id": dag_id, "run_id": run_id, "map_index": map_index}
    if task_id is not None and task_id != "trial":
        query["task_id"] = task_id
    return f"{base_url()}plugin/trialflow?" + urlencode(query)


def experiment_page(experiment_id: str) -> str:
    """The experiment's page, absolute when ``[api] base_url`` names the host (so a link in an
    asset event or a notification works outside the UI), else from the site's root."""
    return f"{_site()}{base_url()}plugin/trialflow?" + urlencode({"experiment": experiment_id})


def platform_url(template: str | None, handle: dict[str, Any]) -> str | None:
    """A platform's page for a trial, from the config's ``trialWebUrl`` template: handle fields
    ({trial_id}, {name}, {namespace}, {host}, {trial_dir}, {experiment_id}) URL-quoted; only
    http(s) addresses are links."""
    from trialflow.config.web_url import fill_web_url

    if not template:
        own = handle.get("web_url")  # a platform that knows its job page (OpenPAI) says it
        return own if isinstance(own, str) and own.startswith(("http://", "https://")) else None
    return fill_web_url(template, handle)


def trial_platform_page(template: str | None, handle: dict[str, Any], experiment_id: str) -> str | None:
    """The trial's page on its platform (platform_url over its handle and experiment), as both
    starts (a worker's, the triggerer's) keep it for the "Platform" link."""
    return platform_url(template, {**handle, "experiment_id": experiment_id})


class TrialLink(BaseOperatorLink):
    name = "Trial"

    def get_link(self, operator: Any, *, ti_key: TaskInstanceKey) -> str:
        return trial_page(ti_key.dag_id, ti_key.run_id, ti_key.map_index, ti_key.task_id)


class PlatformLink(BaseOperatorLink):
    name = "Platform"

    def get_link(self, operator: Any, *, ti_key: TaskInstanceKey) -> str:
        """The page the attempt kept: from the operator where this process submitted the trial
        (``platform_web_url``: no request to the api-server), else read back from XCom (an
        attempt resumed after deferring, or one that submitted nothing)."""
        value = getattr(operator, "platform_web_url", None)
        if value is None:
            from airflow.sdk.execution_time.xcom import XCom

            value = XCom.get_value(ti_key=ti_key, key=PLATFORM_URL_KEY)
        return value if isinstance(value, str) and value.startswith(("http://", "https://")) else ""


def _site() -> str:
    """``[api] base_url``'s scheme and host when it names them (links that leave Airflow), else ""."""
    from urllib.parse import urlsplit

    from airflow.configuration import conf

    configured = urlsplit(conf.get("api", "base_url", fallback="") or "")
    return f"{configured.scheme}://{configured.netloc}" if configured.scheme and configured.netloc else ""


def tracking_links(experiment_id: str) -> Any:
    """The trialflow pages an experiment's MLflow runs link back to (trialflow.tracking.content.
    LinkBack): its page, and each trial's by the task instance that ran it."""
    from trialflow.tracking.content import LinkBack, TaskIdentity

    site = _site()

    def trial(task: TaskIdentity) -> str:
        return site + trial_page(task.dag_id, task.run_id, task.map_index, task.task_id)

    return LinkBack(experiment_page=experiment_page(experiment_id), trial_page=trial)

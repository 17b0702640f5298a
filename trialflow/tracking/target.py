"""Where an experiment is tracked: the MLflow server's address and credentials, from the
config's ``mlflow`` key and an Airflow connection, or MLflow's own environment variables.

The address a page links to and a trial is told never holds a credential: the credentials stay
here, used by the requests trialflow makes, and never reach a tag, a page, a log or the trial's
environment (a trial that logs to MLflow itself brings its own, as it did before).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from trialflow.config.redaction import mask_text
from trialflow.config.tracking import MlflowConfig
from trialflow.platforms.base import Connections
from trialflow.platforms.event_loop import run_sync


class TrackingNotConfigured(ValueError):
    """The config names MLflow but says no server trialflow can use (no connection, no
    MLFLOW_TRACKING_URI), or names one trialflow does not speak to (not http or https)."""


@dataclass(frozen=True)
class TrackingTarget:
    """One MLflow tracking server and the experiment there an experiment's runs go into."""

    #: http(s)://host[:port][/path], without user or password.
    uri: str
    experiment_name: str
    registered_model: str | None = None
    username: str | None = field(default=None, repr=False)
    password: str | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)

    def run_url(self, experiment_id: str, run_id: str) -> str:
        """The run's page in MLflow's UI."""
        return f"{self.uri.rstrip('/')}/#/experiments/{experiment_id}/runs/{run_id}"


def _plain_uri(uri: str, where: str) -> str:
    parts = urlsplit(uri.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise TrackingNotConfigured(
            f"{where}: expected an http:// or https:// address of an MLflow tracking server, got "
            f"{parts.scheme + '://' if parts.scheme else 'no scheme'}"
        )
    netloc = parts.hostname if parts.port is None else f"{parts.hostname}:{parts.port}"
    if ":" in parts.hostname:  # IPv6
        netloc = f"[{parts.hostname}]" + ("" if parts.port is None else f":{parts.port}")
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))


def from_connection(conn: Any, config: MlflowConfig, default_name: str) -> TrackingTarget:
    """An Airflow connection's host (with its scheme: the connection type http/https, or
    ``extra.scheme``, or one written in the host), port and schema as a path; its login and
    password, or the password alone as a token."""
    host = str(getattr(conn, "host", "") or "")
    extra = _extra(conn)
    scheme = str(extra.get("scheme") or "")
    conn_type = str(getattr(conn, "conn_type", "") or "")
    if "://" not in host:
        scheme = scheme or (conn_type if conn_type in ("http", "https") else "http")
        port = getattr(conn, "port", None)
        path = str(getattr(conn, "schema", "") or "").strip("/")
        host = f"{scheme}://{host}" + (f":{port}" if port else "") + (f"/{path}" if path else "")
    login = getattr(conn, "login", None) or None
    password = getattr(conn, "password", None) or None
    token = extra.get("token") if isinstance(extra.get("token"), str) else None
    if password and not login:
        token, password = token or password, None
    return TrackingTarget(
        uri=_plain_uri(host, f"connection {config.conn_id!r}"),
        experiment_name=config.experiment_name or default_name,
        registered_model=config.registered_model,
        username=login,
        password=password,
        token=token,
    )


def _extra(conn: Any) -> Mapping[str, Any]:
    dejson = getattr(conn, "extra_dejson", None)
    return dejson if isinstance(dejson, Mapping) else {}


def from_environment(config: MlflowConfig, default_name: str, env: Mapping[str, str] | None = None) -> TrackingTarget:
    """MLflow's own variables where trialflow logs: MLFLOW_TRACKING_URI, and
    MLFLOW_TRACKING_USERNAME / _PASSWORD or MLFLOW_TRACKING_TOKEN."""
    env = os.environ if env is None else env
    uri = env.get("MLFLOW_TRACKING_URI", "")
    if not uri:
        raise TrackingNotConfigured(
            "mlflow: no connId, and MLFLOW_TRACKING_URI is not set where trialflow logs (the "
            "triggerer and workers): name the tracking server's Airflow connection in mlflow.connId"
        )
    parts = urlsplit(uri)
    return TrackingTarget(
        uri=_plain_uri(uri, "MLFLOW_TRACKING_URI"),
        experiment_name=config.experiment_name or default_name,
        registered_model=config.registered_model,
        username=env.get("MLFLOW_TRACKING_USERNAME") or parts.username,
        password=env.get("MLFLOW_TRACKING_PASSWORD") or parts.password,
        token=env.get("MLFLOW_TRACKING_TOKEN") or None,
    )


async def aresolve(config: MlflowConfig, default_name: str, connections: Connections | None) -> TrackingTarget:
    """The target the config names (see module); TrackingNotConfigured when there is none. In
    the triggerer, on its event loop (Airflow's connection lookup belongs there)."""
    if config.conn_id is None:
        return from_environment(config, default_name)
    opener = connections.opener("connection") if connections is not None else None
    if opener is None:
        raise TrackingNotConfigured(
            f"mlflow.connId {config.conn_id!r} is an Airflow connection: it is read where Airflow runs"
        )
    try:
        conn = await opener(config.conn_id)
    except Exception as exc:  # Airflow's AirflowNotFoundException, a secrets backend refusing
        raise TrackingNotConfigured(f"mlflow.connId {config.conn_id!r}: {mask_text(str(exc))}") from None
    return from_connection(conn, config, default_name)


def resolve(config: MlflowConfig, default_name: str, connections: Connections | None) -> TrackingTarget:
    """``aresolve`` from synchronous code (a worker's task, the command line)."""
    return run_sync(aresolve(config, default_name, connections))

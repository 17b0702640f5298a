"""Where an experiment's MLflow logging goes, checked before it runs, from what this process
can see: the config's ``mlflow`` key and the environment.

A run whose tracking server could not be found said "success" and logged nothing to MLflow,
and only the ``log_to_mlflow`` task's log had a warning: the docs' own snippet
(``connId: mlflow_default``) in a ``trialflow run`` home, where no such connection exists, did
exactly that. ``trialflow validate`` and ``trialflow run`` call this first.

Two kinds of finding. An address that is there but malformed (``htp//127.0.0.1``) can never
work: an error. A connection or variable this process does not see may still exist where
Airflow runs (a deployment's connections, a secrets backend): a warning that names it and
says how to give one. A ``trialflow run`` home's Airflow has exactly this environment, so
there the warning is the whole story, and it says so.

Nothing here imports Airflow, and no message holds more of an address than its scheme. A
connection variable is read by the small parser below, not Airflow's ``Connection(uri=...)``:
importing that took 1.5 s (this module 0.2 s), logged Airflow's fernet warning into the
command's output, and registered the password with the secrets masker of a process that only
checks; what it reads (scheme, host, port, path, login, password, query as extra) is the
subset ``from_connection`` uses.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from trialflow.config.tracking import MlflowConfig
from trialflow.tracking.target import TrackingNotConfigured, from_connection, from_environment

#: The longest connection value read here (an Airflow connection URI or its JSON form).
MAX_CONNECTION_VALUE = 16_384


@dataclass(frozen=True)
class TrackingFinding:
    """What the check found: ``error`` when the address cannot work wherever it runs."""

    message: str
    error: bool


def connection_variable(conn_id: str) -> str:
    """The environment variable Airflow reads a connection from (``AIRFLOW_CONN_<ID>``)."""
    return f"AIRFLOW_CONN_{conn_id.upper()}"


def check_tracking(config: MlflowConfig | None, env: Mapping[str, str]) -> TrackingFinding | None:
    """None when the config logs nothing, or its server's address is here and well formed."""
    if config is None:
        return None
    if config.conn_id is None:
        if not env.get("MLFLOW_TRACKING_URI"):
            return TrackingFinding(
                "mlflow: no connId, and MLFLOW_TRACKING_URI is not set here: nothing reaches MLflow "
                "unless the triggerer and workers have it (a `trialflow run` home's Airflow has this "
                "environment): export MLFLOW_TRACKING_URI=http://host:5000, or name the tracking "
                "server's Airflow connection in mlflow.connId",
                error=False,
            )
        try:
            from_environment(config, "check", env)
        except TrackingNotConfigured as exc:
            return TrackingFinding(str(exc), error=True)
        return None
    variable = connection_variable(config.conn_id)
    value = env.get(variable)
    if value is None:
        return TrackingFinding(
            f"mlflow.connId {config.conn_id!r}: no such connection is visible here ({variable} is not "
            "set): nothing reaches MLflow unless it exists where Airflow runs (Admin > Connections, a "
            f"secrets backend, or that variable). A `trialflow run` home's Airflow has only its "
            f"environment's: export {variable}='http://host:5000' first",
            error=False,
        )
    try:
        from_connection(_connection(value, variable), config, "check")
    except TrackingNotConfigured as exc:
        return TrackingFinding(str(exc), error=True)
    return None


def _connection(value: str, variable: str) -> Any:
    """An Airflow connection from its environment variable's value (its URI, or the JSON form),
    with the attributes trialflow.tracking.target.from_connection reads."""
    if len(value) > MAX_CONNECTION_VALUE:
        raise TrackingNotConfigured(f"{variable}: over {MAX_CONNECTION_VALUE} characters")
    if value.lstrip().startswith("{"):
        try:
            fields: dict[str, Any] = json.loads(value)  # text opening with '{' is an object, or no JSON
        except (ValueError, RecursionError):
            raise TrackingNotConfigured(f"{variable}: not a connection URI and not JSON") from None
        extra = fields.get("extra")
        if isinstance(extra, str):
            try:
                extra = json.loads(extra)
            except (ValueError, RecursionError):
                extra = {}
        return SimpleNamespace(
            conn_type=fields.get("conn_type"),
            host=fields.get("host"),
            port=fields.get("port"),
            schema=fields.get("schema"),
            login=fields.get("login"),
            password=fields.get("password"),
            extra_dejson=extra if isinstance(extra, dict) else {},
        )
    parts = urlsplit(value.strip())
    if not parts.scheme:
        raise TrackingNotConfigured(f"{variable}: expected a connection URI (http://host:port) or its JSON form")
    try:
        port = parts.port
    except ValueError:
        raise TrackingNotConfigured(f"{variable}: its port is not a number") from None
    return SimpleNamespace(
        conn_type=parts.scheme.replace("-", "_"),
        host=unquote(parts.hostname or ""),
        port=port,
        schema=unquote(parts.path.lstrip("/")),
        login=unquote(parts.username) if parts.username else None,
        password=unquote(parts.password) if parts.password else None,
        extra_dejson=dict(parse_qsl(parts.query)),
    )

"""trialflow's calls to an MLflow tracking server: MLflow's own REST helper, each call bounded.

MLflow's client retries a request up to 7 times with a growing back-off and waits 120 s for an
answer (MLFLOW_HTTP_REQUEST_MAX_RETRIES / _TIMEOUT, read from the process's environment): a
server that is down would hold whoever logs for minutes. trialflow's outbox already retries
(trialflow.tracking.outbox), so each request here is made once with a short timeout, through
MLflow's ``http_request`` (its authentication, TLS and headers) with those given explicitly,
and no process-wide setting is changed for anyone else's MLflow calls. The endpoints are
MLflow's documented REST API 2.0. With trialflow.tracking.mlflow_model (an MLmodel file), the
only modules that import MLflow (the ``mlflow`` extra).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from trialflow.tracking.content import Batch
from trialflow.tracking.target import TrackingTarget

#: Seconds one request may take before the server is taken as not answering.
REQUEST_TIMEOUT = 5.0
_FILTER_VALUE = re.compile(r"^[\w.\-/: ]{1,250}$")


#: The experiment tag MLflow's UI reads to open an experiment on its training runs.
_TRAINING_KIND = {"key": "mlflow.experimentKind", "value": "custom_model_development"}


class TrackingUnavailable(Exception):
    """The tracking server did not answer, or refused: what was to be sent stays in the outbox."""


def _client_missing() -> TrackingUnavailable:
    return TrackingUnavailable(
        "MLflow's client is not installed where trialflow logs: install airflow-provider-trialflow[mlflow]"
    )


class MlflowRest:
    """The few calls tracking makes (TrackingClient), each once, within ``timeout`` seconds."""

    def __init__(self, target: TrackingTarget, timeout: float = REQUEST_TIMEOUT):
        try:
            from mlflow.utils.rest_utils import MlflowHostCreds
        except ImportError:
            raise _client_missing() from None
        self.target, self.timeout = target, timeout
        self.creds = MlflowHostCreds(  # type: ignore[no-untyped-call]
            host=target.uri, username=target.username, password=target.password, token=target.token
        )

    def _call(self, endpoint: str, method: str, body: Mapping[str, Any]) -> dict[str, Any]:
        from mlflow.exceptions import MlflowException
        from mlflow.utils.rest_utils import http_request

        kwargs: dict[str, Any] = {"params": dict(body)} if method == "GET" else {"json": dict(body)}
        try:
            response = http_request(  # type: ignore[no-untyped-call]
                self.creds,
                f"/api/2.0/mlflow/{endpoint}",
                method,
                max_retries=0,
                backoff_factor=0,
                backoff_jitter=0,
                timeout=self.timeout,
                raise_on_status=False,
                **kwargs,
            )
        except MlflowException as exc:
            raise TrackingUnavailable(f"{self.target.uri} did not answer {endpoint}: {_short(exc)}") from None
        except Exception as exc:  # requests' own errors, where MLflow passes them on
            raise TrackingUnavailable(f"{self.target.uri} did not answer {endpoint}: {_short(exc)}") from None
        try:
            data = response.json() if response.text else {}
        except ValueError:
            data = {}
        if response.status_code != 200:
            code = data.get("error_code") if isinstance(data, dict) else None
            message = data.get("message") if isinstance(data, dict) else None
            raise RefusedRequest(response.status_code, str(code or ""), _short(message or response.text))
        return data if isinstance(data, dict) else {}

    # -- experiments and runs ---------------------------------------------------------------

    def experiment_id(self, name: str) -> str:
        """The MLflow experiment ``name``'s id, made when missing (a twin's make is fine)."""
        for _ in range(2):
            try:
                found = self._call("experiments/get-by-name", "GET", {"experiment_name": name})
                return str(found["experiment"]["experiment_id"])
            except RefusedRequest as exc:
                if exc.code != "RESOURCE_DOES_NOT_EXIST":
                    raise
            try:
                # MLflow's UI shows a model-training experiment's runs (not its GenAI views)
                made = self._call("experiments/create", "POST", {"name": name, "tags": [_TRAINING_KIND]})
                return str(made["experiment_id"])
            except RefusedRequest as exc:
                if exc.code != "RESOURCE_ALREADY_EXISTS":
                    raise
        raise TrackingUnavailable(f"{self.target.uri}: experiment {name!r} neither found nor made")

    def find_run(self, experiment_id: str, key: str) -> str | None:
        """The run tagged ``trialflow.key = key`` (a run made before its answer was lost)."""
        if not _FILTER_VALUE.match(key):
            return None
        found = self._call(
            "runs/search",
            "POST",
            {
                "experiment_ids": [experiment_id],
                "filter": f"tags.`trialflow.key` = '{key}'",
                "max_results": 1,
                "run_view_type": "ALL",
            },
        )
        runs = found.get("runs") or []
        return str(runs[0]["info"]["run_id"]) if runs else None

    def create_run(self, experiment_id: str, start_ms: int, tags: Mapping[str, str]) -> str:
        made = self._call(
            "runs/create",
            "POST",
            {
                "experiment_id": experiment_id,
                "start_time": start_ms,
                "run_name": tags.get("mlflow.runName", ""),
                "tags": [{"key": k, "value": v} for k, v in tags.items()],
            },
        )
        return str(made["run"]["info"]["run_id"])

    def log(self, run_id: str, batch: Batch) -> None:
        self._call(
            "runs/log-batch",
            "POST",
            {
                "run_id": run_id,
                "metrics": [
                    {"key": m.key, "value": m.value, "step": m.step, "timestamp": m.timestamp} for m in batch.metrics
                ],
                "params": [{"key": k, "value": v} for k, v in batch.params],
                "tags": [{"key": k, "value": v} for k, v in batch.tags],
            },
        )

    def end(self, run_id: str, status: str, end_ms: int | None) -> None:
        body: dict[str, Any] = {"run_id": run_id, "status": status}
        if end_ms is not None:
            body["end_time"] = end_ms
        self._call("runs/update", "POST", body)

    def delete_tag(self, run_id: str, key: str) -> None:
        try:
            self._call("runs/delete-tag", "POST", {"run_id": run_id, "key": key})
        except RefusedRequest as exc:
            if exc.code != "RESOURCE_DOES_NOT_EXIST":
                raise

    def run_url(self, experiment_id: str, run_id: str) -> str:
        return self.target.run_url(experiment_id, run_id)

    # -- the model registry -----------------------------------------------------------------

    def registered_model(self, name: str) -> None:
        try:
            self._call("registered-models/create", "POST", {"name": name})
        except RefusedRequest as exc:
            if exc.code != "RESOURCE_ALREADY_EXISTS":
                raise

    def model_version(self, name: str, source: str, run_id: str, tags: Mapping[str, str], description: str) -> str:
        made = self._call(
            "model-versions/create",
            "POST",
            {
                "name": name,
                "source": source,
                "run_id": run_id,
                "tags": [{"key": k, "value": v} for k, v in tags.items()],
                "description": description,
            },
        )
        return str(made["model_version"]["version"])

    def model_versions(self, name: str, run_id: str) -> list[dict[str, Any]]:
        found = self._call(
            "model-versions/search", "GET", {"filter": f"name = '{name}' and run_id = '{run_id}'", "max_results": 100}
        )
        versions = found.get("model_versions") or []
        return [v for v in versions if isinstance(v, dict)]

    def upload(self, artifact_uri: str, path: str, data: bytes) -> None:
        """Put ``data`` at ``path`` under a run's artifacts: through the server's artifact proxy
        (an ``mlflow-artifacts:`` URI, what ``mlflow server`` serves by default), else with
        MLflow's own artifact repository for that store (its credentials are that store's)."""
        if artifact_uri.startswith("mlflow-artifacts:"):
            from urllib.parse import urlsplit

            from mlflow.exceptions import MlflowException
            from mlflow.utils.rest_utils import http_request

            where = urlsplit(artifact_uri).path.strip("/")  # mlflow-artifacts:/<exp>/<run>/artifacts
            try:
                response = http_request(  # type: ignore[no-untyped-call]
                    self.creds,
                    f"/api/2.0/mlflow-artifacts/artifacts/{where}/{path}",
                    "PUT",
                    max_retries=0,
                    backoff_factor=0,
                    backoff_jitter=0,
                    timeout=max(self.timeout, 60.0),
                    raise_on_status=False,
                    data=data,
                )
            except MlflowException as exc:
                raise TrackingUnavailable(f"{self.target.uri} did not take artifact {path}: {_short(exc)}") from None
            if response.status_code != 200:
                raise RefusedRequest(response.status_code, "", _short(response.text))
            return
        import os
        import tempfile

        from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository

        folder, name = os.path.split(path)
        with tempfile.TemporaryDirectory() as scratch:
            local = os.path.join(scratch, name)
            with open(local, "wb") as out:
                out.write(data)
            get_artifact_repository(artifact_uri).log_artifact(local, folder or None)  # type: ignore[no-untyped-call]

    def run_artifact_uri(self, run_id: str) -> str:
        return str(self._call("runs/get", "GET", {"run_id": run_id})["run"]["info"]["artifact_uri"])


class RefusedRequest(TrackingUnavailable):
    """The server answered, and said no (its status and MLflow's error code)."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(f"MLflow refused ({status} {code}): {message}")
        self.status, self.code = status, code


def _short(value: object, limit: int = 300) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"

"""Trials as Azure Machine Learning command jobs, through the current SDK (azure-ai-ml v2).

NNI drove Azure ML through the v1 SDK (azureml-core), out of support since
2026-06; trialflow uses ``MLClient`` and one command job per trial, named after
the trial id, so a retried task finds its job and re-attaches. The code goes
the SDK's way (uploaded to the workspace's blob store as a code asset,
looked up by content hash before each upload), with trialflow's light
SDK beside it; parameters travel in the job's environment and are written to
parameter.cfg before the trial command runs; metrics are the ``NNISDK_MEb``
lines of the job's ``user_logs/std_log.txt``, which Azure ML uploads to the
workspace's artifact store while the job runs, read by byte offset.

Credentials: azure-identity's DefaultAzureCredential chain (environment,
workload or managed identity, Azure CLI login, ...). A private or sovereign
cloud is named the SDK's way, with ``ARM_CLOUD_METADATA_URL``. Only this module
imports the SDK, lazily: validating a config does not need it installed.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import shlex
import shutil
import tempfile
from pathlib import Path
from typing import Any, ClassVar

import yaml

from trialflow.config.platforms import AmlConfig
from trialflow.platforms.base import (
    Connections,
    Cursor,
    TrainingPlatform,
    TrialHandle,
    TrialSpec,
    TrialStatus,
    TrialUpdate,
    job_name_for,
)
from trialflow.platforms.mounted import parse_cancel, read_metric_lines
from trialflow.trial.packing import SDK_FILES, check_limits, collect_files, sdk_pythonpath
from trialflow.trial.protocol import Metric

#: azure-ai-ml logs "Class X: This is an experimental class" at WARNING for classes its own
#: schemas load (six of them on every first job): noise in `trialflow render` and in every trial
#: task's log, about the SDK's internals and nothing the user chose. Its real warnings stay.
logging.getLogger("azure.ai.ml._utils._experimental").setLevel(logging.ERROR)

SDK_FOLDER = ".trialflow-sdk"
PARAMETER_VAR = "TRIALFLOW_PARAMETER_CFG"
LOG_BLOB = "ExperimentRun/dcid.{name}/user_logs/std_log.txt"
ARTIFACT_STORE = "workspaceartifactstore"
CANCEL_TAG = "trialflow.cancel"

#: Azure ML job status -> NNI status (Canceled: the cancel status trialflow tagged, else SYS_CANCELED).
STATES: dict[str, TrialStatus] = {
    "NotStarted": TrialStatus.WAITING,
    "Starting": TrialStatus.WAITING,
    "Provisioning": TrialStatus.WAITING,
    "Preparing": TrialStatus.WAITING,
    "Queued": TrialStatus.WAITING,
    "Paused": TrialStatus.WAITING,
    "Unknown": TrialStatus.WAITING,
    "Running": TrialStatus.RUNNING,
    "Finalizing": TrialStatus.RUNNING,
    "CancelRequested": TrialStatus.RUNNING,
    "NotResponding": TrialStatus.RUNNING,
    "Completed": TrialStatus.SUCCEEDED,
    "Failed": TrialStatus.FAILED,
    "Canceled": TrialStatus.SYS_CANCELED,
}


class AmlError(RuntimeError):
    """Azure ML refused what this config asks; the message names the config key to change."""


job_name = job_name_for


def sys_dir(trial_id: str) -> str:
    """NNI_SYS_DIR inside the job: a folder of the job's own machine."""
    return f"/tmp/trialflow/{trial_id}"


def job_command(spec: TrialSpec) -> str:
    """The job's command (bash, run in the code folder): parameter.cfg from the environment,
    trialflow's SDK on PYTHONPATH, then the trial command, quoted once."""
    q = shlex.quote
    folder = q(sys_dir(spec.trial_id))
    return (
        f"mkdir -p {folder} && printf '%s' \"${PARAMETER_VAR}\" > {folder}/parameter.cfg && "
        f'export PYTHONPATH="{sdk_pythonpath("$PWD/" + SDK_FOLDER)}${{PYTHONPATH:+:$PYTHONPATH}}" && '
        f"sh -c {q(spec.command)}"
    )


def job_environment(spec: TrialSpec) -> dict[str, str]:
    env = spec.environment("aml", sys_dir(spec.trial_id), ".", gpu_indices=None, base={}, marked=False)
    env[PARAMETER_VAR] = spec.parameter_cfg()
    return env


def job_status(status: str | None) -> TrialStatus:
    return STATES.get(status or "", TrialStatus.WAITING)


def stage_code(code_dir: Path, excludes: tuple[Path, ...], target: Path) -> Path:
    """The folder the SDK uploads: the trial code (honouring .nniignore and NNI's limits, never
    the experiment's config) and trialflow's SDK; the SDK looks the folder up by its content hash."""
    files = collect_files(code_dir, excludes)
    check_limits(code_dir, files)
    for rel in files:
        (target / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(code_dir / rel, target / rel, follow_symlinks=False)
    import trialflow

    root = Path(trialflow.__file__).resolve().parent.parent
    for name in SDK_FILES:
        (target / SDK_FOLDER / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / name, target / SDK_FOLDER / name)
    return target


class AmlPlatform(TrainingPlatform[AmlConfig]):
    name: ClassVar[str] = "aml"

    @classmethod
    def checkpoints_refused(cls, config: Any) -> str | None:
        return (
            "trialflow does not yet keep checkpoints or restart trials on aml: a job's files come back only "
            "through its outputs, which it does not read yet (local, remote, OpenPAI, DLTS and the Kubernetes "
            "platforms with mounted storage keep them)"
        )

    def __init__(self, config: AmlConfig, experiment_dir: Path, connections: Connections | None = None):
        super().__init__(config, experiment_dir, connections)
        self._ml: Any = None
        self._logs: Any = None

    # -- the SDK, lazily ---------------------------------------------------------------------

    @property
    def ml(self) -> Any:
        if self._ml is None:
            from azure.ai.ml import MLClient
            from azure.identity import DefaultAzureCredential

            self._ml = MLClient(
                DefaultAzureCredential(),
                self.config.subscription_id,
                self.config.resource_group,
                self.config.workspace_name,
                show_progress=False,
                enable_telemetry=False,
            )
        return self._ml

    def build_job(self, spec: TrialSpec, code: Path) -> Any:
        from azure.ai.ml import command
        from azure.ai.ml.entities import Environment

        return command(
            name=job_name(spec.trial_id),
            display_name=spec.trial_id,
            experiment_name=f"trialflow-{spec.experiment_id}",
            code=str(code),
            command=job_command(spec),
            environment=Environment(image=self.config.docker_image),
            environment_variables=job_environment(spec),
            compute=self.config.compute_target,
            tags={"trialflow.experiment": spec.experiment_id, "trialflow.trial": spec.trial_id},
        )

    # -- checks ------------------------------------------------------------------------------

    def preflight(self, code_dir: Path, excludes: tuple[Path, ...] = ()) -> list[tuple[tuple[str | int, ...], str]]:
        try:
            import azure.ai.ml
            import azure.identity  # noqa: F401
        except ImportError:
            return [(("platform",), "Azure ML needs azure-ai-ml and azure-identity: install trialflow's [azure] extra")]
        if not Path(code_dir).is_dir():
            return [(("trialCodeDirectory",), f"the trial code directory {code_dir} does not exist")]
        try:
            check_limits(code_dir, collect_files(code_dir, excludes))
        except ValueError as exc:
            return [(("trialCodeDirectory",), str(exc))]
        return []

    async def prepare(self, experiment_id: str) -> None:
        """Fail the start step before any trial when the credential, the workspace or the
        compute target is refused."""
        await asyncio.to_thread(self._check_access)

    def _check_access(self) -> None:
        from azure.core.exceptions import ClientAuthenticationError, HttpResponseError, ResourceNotFoundError

        try:
            self.ml.workspaces.get(self.config.workspace_name)
        except ClientAuthenticationError as exc:
            if getattr(exc, "status_code", None) in (401, 403):  # a token, refused by the service
                raise AmlError(self._explain(exc)) from None
            raise AmlError(
                f"no Azure credential for subscriptionId {self.config.subscription_id} (azure-identity's "
                f"DefaultAzureCredential chain: environment, managed identity, az login...): {_first(exc)}"
            ) from None
        except ResourceNotFoundError:
            raise AmlError(
                f"trainingService.workspaceName {self.config.workspace_name!r} does not exist in resourceGroup "
                f"{self.config.resource_group!r} of subscriptionId {self.config.subscription_id!r}"
            ) from None
        except HttpResponseError as exc:
            raise AmlError(self._explain(exc)) from None
        try:
            self.ml.compute.get(self.config.compute_target)
        except ResourceNotFoundError:
            raise AmlError(
                f"trainingService.computeTarget {self.config.compute_target!r} does not exist in workspace "
                f"{self.config.workspace_name!r}"
            ) from None
        except HttpResponseError as exc:
            raise AmlError(self._explain(exc)) from None

    def _explain(self, exc: Exception) -> str:
        status = getattr(exc, "status_code", None)
        if status in (401, 403):
            return f"the Azure credential was refused for workspace {self.config.workspace_name!r}: {_first(exc)}"
        return f"Azure ML workspace {self.config.workspace_name!r}: {_first(exc)}"

    # -- trials ------------------------------------------------------------------------------

    def render(self, spec: TrialSpec) -> dict[str, Any]:
        out = io.StringIO()
        self.build_job(spec, Path(spec.code_dir)).dump(out)
        return yaml.safe_load(out.getvalue())

    def _handle(self, spec: TrialSpec, job: Any) -> TrialHandle:
        return {
            "platform": "aml",
            "experiment_id": spec.experiment_id,
            "trial_id": spec.trial_id,
            "job": job.name,
            "web_url": job.studio_url or None,
        }

    async def submit(self, spec: TrialSpec) -> TrialHandle:
        return await asyncio.to_thread(self._submit, spec)

    def _submit(self, spec: TrialSpec) -> TrialHandle:
        from azure.core.exceptions import HttpResponseError, ResourceNotFoundError

        try:
            return self._handle(spec, self.ml.jobs.get(job_name(spec.trial_id)))  # a retry: re-attach
        except ResourceNotFoundError:
            pass
        except HttpResponseError as exc:
            raise AmlError(self._explain(exc)) from None
        with tempfile.TemporaryDirectory(prefix="trialflow-aml-code-") as folder:
            code = stage_code(Path(spec.code_dir), spec.code_excludes, Path(folder))
            try:
                job = self.ml.jobs.create_or_update(self.build_job(spec, code))
            except HttpResponseError as exc:
                raise AmlError(self._explain(exc)) from None
        return self._handle(spec, job)

    async def poll(self, handle: TrialHandle, cursor: Cursor) -> TrialUpdate:
        return await asyncio.to_thread(self._poll, handle, cursor)

    def _poll(self, handle: TrialHandle, cursor: Cursor) -> TrialUpdate:
        from azure.core.exceptions import HttpResponseError, ResourceNotFoundError

        try:
            job = self.ml.jobs.get(handle["job"])
        except ResourceNotFoundError:
            return TrialUpdate(TrialStatus.FAILED, [], cursor, f"Azure ML job {handle['job']} is gone")
        except HttpResponseError as exc:
            raise AmlError(self._explain(exc)) from None
        status = job_status(job.status)
        message = None
        if status is TrialStatus.SYS_CANCELED:
            asked = parse_cancel((job.tags or {}).get(CANCEL_TAG))
            status, message = asked if asked else (status, "canceled in Azure ML")
        cursor = dict(cursor)
        metrics, skipped = self._read_log(handle["job"], cursor, status.is_terminal)
        return TrialUpdate(status, metrics, cursor, message, None, skipped)

    def _log_blob(self, name: str) -> Any:
        """The job's std_log.txt in the workspace's artifact store, through the datastore's own
        account, endpoint and key (public SDK calls only)."""
        if self._logs is None:
            from azure.storage.blob import ContainerClient

            store = self.ml.datastores.get(ARTIFACT_STORE, include_secrets=True)
            account_url = f"{store.protocol}://{store.account_name}.blob.{store.endpoint}"
            key = getattr(store.credentials, "account_key", None)
            credential: Any = (
                {"account_name": store.account_name, "account_key": key}
                if key
                else getattr(store.credentials, "sas_token", None)
            )
            self._logs = ContainerClient(account_url, store.container_name, credential=credential)
        return self._logs.get_blob_client(LOG_BLOB.format(name=name))

    def _read_log(self, name: str, cursor: dict[str, Any], final: bool) -> tuple[list[Metric], list[str]]:
        from azure.core.exceptions import HttpResponseError, ResourceNotFoundError

        blob = self._log_blob(name)

        def read(offset: int, limit: int) -> bytes:
            try:
                return bytes(blob.download_blob(offset=offset, length=limit).readall())
            except ResourceNotFoundError:
                return b""  # not uploaded yet
            except HttpResponseError as exc:
                if exc.status_code == 416:  # nothing past the offset yet
                    return b""
                raise

        return read_metric_lines(read, cursor, final)

    async def stop(self, handle: TrialHandle, status: TrialStatus, reason: str) -> None:
        await asyncio.to_thread(self._stop, handle, status, reason)

    def _stop(self, handle: TrialHandle, status: TrialStatus, reason: str) -> None:
        """Tag why on the job (whichever process polls next reads it), then cancel it."""
        from azure.core.exceptions import HttpResponseError, ResourceNotFoundError

        try:
            job = self.ml.jobs.get(handle["job"])
            job.tags = {**(job.tags or {}), CANCEL_TAG: json.dumps({"status": status.value, "reason": reason})}
            self.ml.jobs.create_or_update(job)
            self.ml.jobs.begin_cancel(handle["job"]).result(timeout=120)
        except ResourceNotFoundError:
            return
        except HttpResponseError as exc:
            raise AmlError(self._explain(exc)) from None


def _first(exc: Exception) -> str:
    text = getattr(exc, "message", None) or str(exc)
    return str(text).strip().splitlines()[0][:300] if str(text).strip() else type(exc).__name__

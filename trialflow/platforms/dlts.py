"""Trials as DLTS (DLWorkspace) jobs, through the dashboard's API as NNI's dlts service used it.

NNI ran its manager inside a DLTS job, so the manager and the trials shared the
cluster's work storage at the same path. trialflow keeps that: by default the
experiment's folder must be on that storage, at the same path in the jobs
(``localStorageMountPoint`` / ``containerStorageMountPoint``, trialflow's keys,
map it when the paths differ). Code, parameter.cfg, the trial's output
(metrics) and its exit code travel through it; nothing reaches back to Airflow.

DLTS authenticates with ``email`` and ``password`` as query parameters on every
call. They stay in the REST client: never in a handle, an error or a log line
(the client scrubs them and keeps query strings out of httpx's logs).

DLTS names jobs by id, not by our name, so a submit is made idempotent on the
shared storage: the job id is written beside the trial as soon as DLTS returns
it, and a retried task re-attaches to it. Kill is ``status: killing``.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import quote, urlsplit

from trialflow.config.platforms import DltsConfig
from trialflow.platforms.base import (
    Connections,
    Cursor,
    Resume,
    TrainingPlatform,
    TrialHandle,
    TrialSpec,
    TrialStatus,
    TrialUpdate,
    job_name_for,
)
from trialflow.platforms.mounted import (
    LOG_FILE,
    RC_FILE,
    SharedPaths,
    job_script,
    read_log_metrics,
    record_cancel,
    recorded_cancel,
    resume_in_folder,
    shared_paths,
    signal_fault,
    stage_tree,
    write_parameter_file,
)
from trialflow.platforms.rest import RestClient, RestError
from trialflow.trial.folder import read_small

JOB_FILE = ".trialflow-job.json"
CLAIM_FILE = ".trialflow-submit"
#: How long a retried submit waits for another attempt's job id before submitting itself.
CLAIM_WAIT_SECONDS = 30.0

#: jobStatus -> NNI status (NNI's table; ``killing`` waits for ``killed`` so the last output is read).
STATES: dict[str, TrialStatus] = {
    "unapproved": TrialStatus.WAITING,
    "queued": TrialStatus.WAITING,
    "scheduling": TrialStatus.WAITING,
    "running": TrialStatus.RUNNING,
    "finished": TrialStatus.SUCCEEDED,
    "failed": TrialStatus.FAILED,
    "pausing": TrialStatus.RUNNING,
    "paused": TrialStatus.RUNNING,
    "killing": TrialStatus.RUNNING,
    "killed": TrialStatus.SYS_CANCELED,
    "error": TrialStatus.FAILED,
}


class DltsError(RuntimeError):
    """DLTS refused what this config asks; the message names the config key to change."""


def credentials(config: DltsConfig) -> tuple[str | None, str | None, str | None]:
    """(email, password, team): the config's, else DLTS's own job variables, as NNI read them
    when it ran inside a DLTS job."""
    password = config.password.get_secret_value() if config.password is not None else None
    return (
        config.email or os.environ.get("DLWS_USER_EMAIL"),
        password or os.environ.get("DLTS_JOB_TOKEN"),
        config.team or os.environ.get("DLWS_VC_NAME"),
    )


def dashboard(config: DltsConfig) -> str:
    """The dashboard URL ending in a slash (NNI appended ``api/...`` to it)."""
    return config.dashboard.rstrip("/") + "/"


job_name = job_name_for


def build_job(
    config: DltsConfig, spec: TrialSpec, email: str, team: str, gpu_type: str, command: str
) -> dict[str, Any]:
    """The job body NNI's DLTSJobConfig sent: a regular training job in the team's virtual
    cluster, the work path mounted (the shared storage), no ssh/ipython/tensorboard."""
    return {
        "jobName": job_name(spec.trial_id),
        "team": team,
        "vcName": team,
        "userName": email,
        "jobType": "training",
        "jobtrainingtype": "RegularJob",
        "preemptionAllowed": "False",
        "image": config.docker_image,
        "cmd": command,
        "resourcegpu": spec.gpu_number,
        "gpuType": gpu_type,
        "ssh": False,
        "ipython": False,
        "tensorboard": False,
        "workPath": "",
        "enableworkpath": True,
        "dataPath": "",
        "enabledatapath": False,
        "jobPath": "",
        "enablejobpath": True,
        "mountpoints": [],
        "env": [],
        "hostNetwork": False,
        "useGPUTopology": False,
        "isPrivileged": False,
        "hostIPC": False,
        "interactivePorts": [],
    }


def gpu_type_of(cluster_info: Any) -> str:
    """NNI: the first key of the cluster's ``gpu_capacity``."""
    capacity = cluster_info.get("gpu_capacity") if isinstance(cluster_info, dict) else None
    if not isinstance(capacity, dict) or not capacity:
        raise DltsError("the DLTS cluster reports no gpu_capacity, so no GPU type to ask for")
    return str(next(iter(capacity)))


def job_status(body: Any) -> TrialStatus:
    state = str(body.get("jobStatus") if isinstance(body, dict) else "").lower()
    return STATES.get(state, TrialStatus.WAITING)


class DltsPlatform(TrainingPlatform[DltsConfig]):
    name: ClassVar[str] = "dlts"
    #: The job writes its output beside the trial on the shared folder Airflow mounts too.
    log_files: ClassVar[tuple[str, ...]] = (LOG_FILE,)
    #: The trial's folder is on the storage the Airflow workers mount: checkpoints are read
    #: there; a restart is a job of its own appending to the same trial.log (the cursor goes on).
    keeps_checkpoints: ClassVar[bool] = True
    restart_keeps_output: ClassVar[bool] = True

    def __init__(self, config: DltsConfig, experiment_dir: Path, connections: Connections | None = None):
        super().__init__(config, experiment_dir, connections)
        self.email, password, self.team = credentials(config)
        self.has_password = bool(password)
        self.api = RestClient(
            dashboard(config), params={"email": self.email or "", "password": password or ""}, secrets=[password or ""]
        )
        self._gpu_type: str | None = None

    # -- checks ------------------------------------------------------------------------------

    def _mounts(self) -> tuple[Path, str]:
        local = self.config.local_storage_mount_point or self.experiment_dir
        return Path(local), self.config.container_storage_mount_point or str(local)

    def preflight(self, code_dir: Path, excludes: tuple[Path, ...] = ()) -> list[tuple[tuple[str | int, ...], str]]:
        problems: list[tuple[tuple[str | int, ...], str]] = []
        parts = urlsplit(self.config.dashboard)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            problems.append(
                (("dashboard",), f"expected the http(s) address of the dashboard, not {self.config.dashboard!r}")
            )
        checks: tuple[tuple[str, object, str], ...] = (
            ("email", self.email, "DLWS_USER_EMAIL"),
            ("password", self.has_password, "DLTS_JOB_TOKEN"),
            ("team", self.team, "DLWS_VC_NAME"),
        )
        for key, value, variable in checks:
            if not value:
                problems.append(((key,), f"DLTS needs {key} (in the config, or {variable} in the environment)"))
        if (
            self.config.local_storage_mount_point is not None
            and not Path(self.config.local_storage_mount_point).is_dir()
        ):
            problems.append(
                (("localStorageMountPoint",), f"{self.config.local_storage_mount_point} is not a folder here")
            )
        if not Path(code_dir).is_dir():
            problems.append((("trialCodeDirectory",), f"the trial code directory {code_dir} does not exist"))
        return problems

    async def prepare(self, experiment_id: str) -> None:
        """Fail the start step before any trial when the credentials, the team or the cluster
        are refused; learn the cluster's GPU type (a submit needs it)."""
        await self._cluster_gpu_type()

    async def _cluster_gpu_type(self) -> str:
        if self._gpu_type is None:
            team = quote(self.team or "", safe="")
            try:
                info = await self.api.request_json(
                    "GET", f"api/teams/{team}/clusters/{quote(self.config.cluster, safe='')}"
                )
            except RestError as exc:
                raise DltsError(self._explain(exc)) from None
            self._gpu_type = gpu_type_of(info)
        return self._gpu_type

    def _explain(self, exc: RestError) -> str:
        where = f"the DLTS dashboard at {dashboard(self.config)}"
        if exc.status in (401, 403):
            return f"trainingService.email / password were refused by {where} ({exc.service_message})"
        if exc.status == 404 and exc.path.startswith("api/teams/"):
            return (
                f"trainingService.team {self.team!r} / cluster {self.config.cluster!r} is not known to {where} "
                f"({exc.service_message})"
            )
        if exc.status is None:
            return f"trainingService.dashboard: cannot reach {where}: {exc.service_message}"
        return f"{where}: {exc}"

    # -- trials ------------------------------------------------------------------------------

    def paths(self, spec: TrialSpec) -> SharedPaths:
        local, job = self._mounts()
        return shared_paths(local, job, spec.experiment_id, spec.trial_id)

    def _command(self, spec: TrialSpec) -> str:
        p = self.paths(spec)
        env = spec.environment("dlts", p.trial, p.code, gpu_indices=None, base={}, marked=False)
        return "\n".join(job_script(spec.command, p, env))

    def render(self, spec: TrialSpec) -> dict[str, Any]:
        return build_job(
            self.config,
            spec,
            self.email or "",
            self.team or "",
            self._gpu_type or "<the cluster's>",
            self._command(spec),
        )

    def _handle(self, spec: TrialSpec, job_id: str, attempt: int = 0) -> TrialHandle:
        handle: TrialHandle = {
            "platform": "dlts",
            "experiment_id": spec.experiment_id,
            "trial_id": spec.trial_id,
            "job_id": job_id,
            "trial_dir": str(self.paths(spec).local_trial),
            "web_url": f"{dashboard(self.config)}job/{quote(self.team or '')}/{quote(self.config.cluster)}/{job_id}",
        }
        if attempt:
            handle["attempt"] = attempt
        return handle

    async def submit(self, spec: TrialSpec) -> TrialHandle:
        return await self._submit(spec, 0, spec.start_from)

    async def _submit(self, spec: TrialSpec, attempt: int, resume: Resume | None) -> TrialHandle:
        folder = self.paths(spec).local_trial
        job_file, claim_file = _attempt_name(JOB_FILE, attempt), _attempt_name(CLAIM_FILE, attempt)
        known = await self._known_job(folder, job_file, claim_file)
        if known is not None:  # a retried task or restart: re-attach, never a second job
            return self._handle(spec, known, attempt)
        p = self.paths(spec)
        if resume is not None:  # fetched onto the storage, named by the job's own path
            spec = await asyncio.to_thread(resume_in_folder, spec, folder, p.trial, attempt, resume)
        gpu_type = await self._cluster_gpu_type()
        body = build_job(self.config, spec, self.email or "", self.team or "", gpu_type, self._command(spec))
        await asyncio.to_thread(stage_tree, p.local_root, spec.code_dir, spec.code_excludes)
        await asyncio.to_thread(write_parameter_file, folder, spec.parameter_cfg(p.trial))
        try:
            answer = await self.api.request_json(
                "POST", f"api/clusters/{quote(self.config.cluster, safe='')}/jobs", json=body, idempotent=False
            )
        except RestError as exc:
            if exc.status is not None:  # the service answered: nothing started, a retry may submit
                (folder / claim_file).unlink(missing_ok=True)
            raise DltsError(self._explain(exc)) from None
        if not isinstance(answer, dict) or not answer.get("jobId"):
            raise DltsError(f"the DLTS dashboard accepted the job but gave no jobId: {str(answer)[:200]}")
        job_id = str(answer["jobId"])
        tmp = folder / (job_file + ".tmp")
        tmp.write_text(json.dumps({"jobId": job_id}))
        os.replace(tmp, folder / job_file)
        return self._handle(spec, job_id, attempt)

    async def fetch_output(
        self, handle: TrialHandle, relative: str, scratch: Path, max_bytes: int | None = None
    ) -> Path:
        """The trial's folder on the storage, as the Airflow workers mount it: read in place."""
        return Path(handle["trial_dir"])

    def ended_by_fault(self, update: TrialUpdate) -> bool:
        return update.fault is not None

    async def restart(self, handle: TrialHandle, spec: TrialSpec, attempt: int, resume: Resume | None) -> TrialHandle:
        """A new job for the attempt, its id recorded beside the trial per attempt (so a second
        call re-attaches), its checkpoint fetched onto the storage first."""
        return await self._submit(spec, attempt, resume)

    async def _known_job(self, folder: Path, job_file: str = JOB_FILE, claim_file: str = CLAIM_FILE) -> str | None:
        """The job id an earlier attempt recorded; claims the submit otherwise. An attempt that
        died between its POST and recording the id leaves only its claim: wait for the id a
        while, then submit (the one case a second job is possible, said in the log)."""
        folder.mkdir(parents=True, exist_ok=True)
        deadline = asyncio.get_running_loop().time() + CLAIM_WAIT_SECONDS
        while True:
            try:
                return str(json.loads(read_small(folder, job_file) or "null")["jobId"])
            except (ValueError, KeyError, TypeError):
                pass
            try:
                os.close(os.open(folder / claim_file, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
                return None
            except FileExistsError:
                if asyncio.get_running_loop().time() > deadline:
                    import logging

                    logging.getLogger(__name__).warning(
                        "%s: an earlier submit left no job id; submitting again", folder.name
                    )
                    return None
                await asyncio.sleep(1.0)

    def _job_path(self, handle: TrialHandle, v2: bool = False) -> str:
        prefix = "api/v2" if v2 else "api"
        return f"{prefix}/clusters/{quote(self.config.cluster, safe='')}/jobs/{quote(handle['job_id'], safe='')}"

    async def poll(self, handle: TrialHandle, cursor: Cursor) -> TrialUpdate:
        try:
            body = await self.api.request_json("GET", self._job_path(handle, v2=True))
        except RestError as exc:
            if exc.status == 404:
                gone = f"DLTS job {handle['job_id']} is gone"
                return TrialUpdate(TrialStatus.FAILED, [], cursor, gone, fault=gone)
            raise DltsError(self._explain(exc)) from None
        status = job_status(body)
        folder = Path(handle["trial_dir"])
        message = None
        if status is TrialStatus.SYS_CANCELED:
            asked = recorded_cancel(folder)
            status, message = asked if asked else (status, "killed on DLTS")
        cursor = dict(cursor)
        metrics, skipped = await asyncio.to_thread(read_log_metrics, folder, LOG_FILE, cursor, status.is_terminal)
        code = _exit_code(folder) if status.is_terminal else None
        fault = signal_fault(code) if status is TrialStatus.FAILED else None
        return TrialUpdate(status, metrics, cursor, fault or message, code, skipped, fault)

    async def stop(self, handle: TrialHandle, status: TrialStatus, reason: str) -> None:
        await asyncio.to_thread(record_cancel, Path(handle["trial_dir"]), status.value, reason)
        try:
            await self.api.request("PUT", self._job_path(handle) + "/status", json={"status": "killing"}, accept=(404,))
        except RestError as exc:
            raise DltsError(self._explain(exc)) from None

    async def cleanup(self, experiment_id: str) -> None:
        import shutil

        await asyncio.to_thread(shutil.rmtree, self._mounts()[0] / "trialflow" / experiment_id, True)


def _attempt_name(name: str, attempt: int) -> str:
    """A per-attempt file beside the trial (the first attempt's keeps its old name)."""
    return name if attempt == 0 else f"{name}.attempt-{attempt}"


def _exit_code(folder: Path) -> int | None:
    """The trial command's exit code, which the job script leaves beside the trial (DLTS's job
    status has none)."""
    try:
        return int((read_small(folder, RC_FILE) or "").strip())
    except ValueError:
        return None

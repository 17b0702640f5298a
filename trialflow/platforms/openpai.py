"""Trials as OpenPAI jobs, through the REST server's v2 API (as NNI's openpai service used it).

One job per trial, named after the trial id, so a retried task's submit gets
409 and re-attaches instead of starting a second job. Code, trialflow's SDK
and parameter.cfg travel through the storage the jobs mount
(``storageConfigName``): the Airflow workers see it at
``localStorageMountPoint``, the jobs at ``containerStorageMountPoint``. Each
job copies the code into its trial folder there (NNI did the same), runs the
trial command, and tees the output into ``trial.log`` beside it, which polls
read by byte offset for NNI's metric lines: nothing reaches back to Airflow.

The builders (job name, paths, the job protocol, the container script, the
status table) are pure and tested row by row; the class is the shell that
calls the REST server.
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import quote, urlencode, urlsplit

import yaml

from trialflow.config.platforms import OpenpaiConfig
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
from trialflow.trial.packing import check_limits, collect_files

API = "/rest-server/api/v2"
TASK_ROLE = "taskrole"

#: jobStatus.state -> NNI status. STOPPED is whoever stopped it: trialflow's own stops leave
#: the cancel status beside the trial (read in poll); any other stop is, as in NNI, SYS_CANCELED.
STATES: dict[str, TrialStatus] = {
    "WAITING": TrialStatus.WAITING,
    "RUNNING": TrialStatus.RUNNING,
    "STOPPING": TrialStatus.RUNNING,
    "SUCCEEDED": TrialStatus.SUCCEEDED,
    "FAILED": TrialStatus.FAILED,
    "STOPPED": TrialStatus.SYS_CANCELED,
    # NNI had an UNKNOWN status; trialflow keeps following (maxTrialDuration still bounds it).
    "UNKNOWN": TrialStatus.WAITING,
}


class OpenpaiError(RuntimeError):
    """OpenPAI refused what this config asks; the message names the config key to change."""


def job_name(trial_id: str, attempt: int = 0) -> str:
    """The job of a trial's ``attempt``: a restart after a fault is a job of its own."""
    return job_name_for(trial_id if attempt == 0 else f"{trial_id}-a{attempt}")


def paths(config: OpenpaiConfig, experiment_id: str, trial_id: str) -> SharedPaths:
    return shared_paths(config.local_storage_mount_point, config.container_storage_mount_point, experiment_id, trial_id)


def api_base(host: str) -> str:
    """NNI took ``host`` with or without a scheme (http:// assumed) and called the REST server
    under ``/rest-server``."""
    host = host.strip().rstrip("/")
    return host if "://" in host else f"http://{host}"


def job_page(host: str, username: str, name: str) -> str:
    return f"{api_base(host)}/job-detail.html?" + urlencode({"username": username, "jobName": name})


def user_protocol(config: OpenpaiConfig) -> dict[str, Any] | None:
    """``openpaiConfig`` or the YAML of ``openpaiConfigFile`` (the validator allows one)."""
    if config.openpai_config is not None:
        return copy.deepcopy(config.openpai_config)
    if config.openpai_config_file is not None:
        loaded = yaml.safe_load(Path(config.openpai_config_file).read_text(encoding="utf-8"))
        if not isinstance(loaded, dict):
            raise OpenpaiError(f"openpaiConfigFile {config.openpai_config_file} is not a YAML mapping")
        return loaded
    return None


def build_job(config: OpenpaiConfig, spec: TrialSpec, name: str, commands: list[str]) -> dict[str, Any]:
    """The job protocol (v2) for one trial.

    Without ``openpaiConfig`` it is NNI's: one task role, one instance, the config's image,
    CPU, memory and GPUs, the virtual cluster and the storage. With it (NNI's way of asking
    for more), the user's protocol is kept whole except the name and every task role's
    commands, which become the trial's; the storage is added if the user's extras lack it.
    """
    protocol = user_protocol(config)
    if protocol is None:
        protocol = {
            "protocolVersion": 2,
            "type": "job",
            "jobRetryCount": 0,
            "prerequisites": [{"type": "dockerimage", "name": "image", "uri": config.docker_image}],
            "taskRoles": {
                TASK_ROLE: {
                    "instances": 1,
                    "completion": {"minFailedInstances": 1, "minSucceededInstances": -1},
                    "dockerImage": "image",
                    "resourcePerInstance": {
                        "cpu": config.trial_cpu_number,
                        "memoryMB": int(config.trial_memory_size),
                        "gpu": spec.gpu_number,
                    },
                    "commands": [],
                }
            },
        }
        if config.virtual_cluster:
            protocol["defaults"] = {"virtualCluster": config.virtual_cluster}
    protocol["name"] = name
    roles = protocol.get("taskRoles")
    if not isinstance(roles, dict) or not roles:
        raise OpenpaiError("openpaiConfig has no taskRoles: it needs at least one task role")
    for role_name, role in roles.items():
        if not isinstance(role, dict):
            raise OpenpaiError(f"openpaiConfig taskRoles.{role_name}: expected a mapping (instances, commands, ...)")
        role["commands"] = list(commands)
    extras = protocol.setdefault("extras", {})
    storages = extras.setdefault("storages", [])
    if not any(isinstance(s, dict) and s.get("name") == config.storage_config_name for s in storages):
        storages.append({"name": config.storage_config_name})
    return protocol


def job_status(body: dict[str, Any]) -> tuple[TrialStatus, int | None, str | None]:
    """(status, exit code, message) from a job's GET body."""
    job = body.get("jobStatus") or {}
    state = str(job.get("state") or "UNKNOWN").upper()
    code = job.get("appExitCode")
    message = job.get("appExitDiagnostics") or job.get("appExitMessages")
    if isinstance(message, dict):
        message = json.dumps(message)[:300]
    return (
        STATES.get(state, TrialStatus.WAITING),
        code if isinstance(code, int) else None,
        (str(message)[:300] if message else None),
    )


class OpenpaiPlatform(TrainingPlatform[OpenpaiConfig]):
    name: ClassVar[str] = "openpai"
    #: The job writes its output beside the trial on the shared folder Airflow mounts too.
    log_files: ClassVar[tuple[str, ...]] = (LOG_FILE,)
    #: The trial's folder is on the storage the Airflow workers mount: checkpoints are read
    #: there; a restart is a job of its own appending to the same trial.log (the cursor goes on).
    keeps_checkpoints: ClassVar[bool] = True
    restart_keeps_output: ClassVar[bool] = True

    def __init__(self, config: OpenpaiConfig, experiment_dir: Path, connections: Connections | None = None):
        super().__init__(config, experiment_dir, connections)
        self.api: RestClient | None = None
        if config.token is not None:
            self.api = self._client_for(config.token.get_secret_value())

    def _client_for(self, token: str) -> RestClient:
        return RestClient(
            api_base(self.config.host) + API, headers={"Authorization": f"Bearer {token}"}, secrets=[token]
        )

    async def _request(self, method: str, path: str, **kwargs: Any) -> Any:
        return await self._call("request", method, path, **kwargs)

    async def _request_json(self, method: str, path: str, **kwargs: Any) -> Any:
        return await self._call("request_json", method, path, **kwargs)

    async def _call(self, how: str, method: str, path: str, **kwargs: Any) -> Any:
        """Every call to the REST server; the token comes from the config or, once per
        process, from the Airflow connection ``tokenConnId``."""
        if self.api is None:
            conn_id = self.config.token_conn_id or ""
            if self.connections.token is None:
                raise OpenpaiError(
                    f"tokenConnId {conn_id!r} is an Airflow connection: run the experiment under Airflow"
                )
            self.api = self._client_for(await self.connections.token(conn_id))
        return await getattr(self.api, how)(method, path, **kwargs)

    # -- checks ------------------------------------------------------------------------------

    def preflight(self, code_dir: Path, excludes: tuple[Path, ...] = ()) -> list[tuple[tuple[str | int, ...], str]]:
        problems: list[tuple[tuple[str | int, ...], str]] = []
        parts = urlsplit(api_base(self.config.host))
        if parts.scheme not in ("http", "https") or not parts.hostname:
            problems.append(
                (("host",), f"expected an http(s) address of the OpenPAI cluster, not {self.config.host!r}")
            )
        mount = Path(self.config.local_storage_mount_point)
        if not mount.is_dir():
            problems.append(
                (
                    ("localStorageMountPoint",),
                    f"{mount} is not a folder here: mount the storage {self.config.storage_config_name!r} there "
                    "on every Airflow worker (trialflow copies code and parameters through it)",
                )
            )
        elif not os.access(mount, os.W_OK | os.X_OK):
            problems.append((("localStorageMountPoint",), f"cannot write to {mount}"))
        if not Path(code_dir).is_dir():
            problems.append((("trialCodeDirectory",), f"the trial code directory {code_dir} does not exist"))
        else:
            try:
                check_limits(code_dir, collect_files(code_dir, excludes))
            except ValueError as exc:
                problems.append((("trialCodeDirectory",), str(exc)))
        try:
            user_protocol(self.config)
        except (OSError, yaml.YAMLError, OpenpaiError) as exc:
            problems.append((("openpaiConfigFile",), str(exc)))
        return problems

    async def prepare(self, experiment_id: str) -> None:
        """Fail the start step before any trial when the token, the virtual cluster or the
        storage config is refused."""
        try:
            if self.config.virtual_cluster:
                await self._request("GET", f"/virtual-clusters/{quote(self.config.virtual_cluster, safe='')}")
            else:
                await self._request("GET", "/jobs", params={"username": self.config.username})
            await self._request("GET", f"/storages/{quote(self.config.storage_config_name, safe='')}")
        except RestError as exc:
            raise OpenpaiError(self._explain(exc)) from None

    def _explain(self, exc: RestError) -> str:
        where = f"OpenPAI at {api_base(self.config.host)}"
        if exc.status in (401, 403):
            return f"trainingService.token was refused by {where} ({exc.service_message})"
        if exc.status == 404 and "/virtual-clusters/" in exc.path:
            return f"trainingService.virtualCluster {self.config.virtual_cluster!r} does not exist on {where}"
        if exc.status == 404 and "/storages/" in exc.path:
            return f"trainingService.storageConfigName {self.config.storage_config_name!r} does not exist on {where}"
        if exc.status is None:
            return f"trainingService.host: cannot reach {where}: {exc.service_message}"
        return f"{where}: {exc}"

    # -- trials ------------------------------------------------------------------------------

    def _commands(self, spec: TrialSpec) -> list[str]:
        p = paths(self.config, spec.experiment_id, spec.trial_id)
        env = spec.environment("openpai", p.trial, p.code, gpu_indices=None, base={}, marked=False)
        return job_script(spec.command, p, env)

    def render(self, spec: TrialSpec) -> dict[str, Any]:
        return build_job(self.config, spec, job_name(spec.trial_id), self._commands(spec))

    def _handle(self, spec: TrialSpec, name: str) -> TrialHandle:
        p = paths(self.config, spec.experiment_id, spec.trial_id)
        return {
            "platform": "openpai",
            "experiment_id": spec.experiment_id,
            "trial_id": spec.trial_id,
            "user": self.config.username,
            "job": name,
            "trial_dir": str(p.local_trial),
            "web_url": job_page(self.config.host, self.config.username, name),
        }

    async def submit(self, spec: TrialSpec) -> TrialHandle:
        return await self._submit(spec, 0, spec.start_from)

    async def _submit(self, spec: TrialSpec, attempt: int, resume: Resume | None) -> TrialHandle:
        name = job_name(spec.trial_id, attempt)
        p = paths(self.config, spec.experiment_id, spec.trial_id)
        await asyncio.to_thread(stage_tree, p.local_root, spec.code_dir, spec.code_excludes)
        if resume is not None:  # fetched onto the storage, named by the job's own path
            spec = await asyncio.to_thread(resume_in_folder, spec, p.local_trial, p.trial, attempt, resume)
        protocol = build_job(self.config, spec, name, self._commands(spec))
        await asyncio.to_thread(write_parameter_file, p.local_trial, spec.parameter_cfg(p.trial))
        body = yaml.safe_dump(protocol, sort_keys=False)
        try:
            await self._request("POST", "/jobs", content=body, headers={"Content-Type": "text/yaml"}, accept=(409,))
        except RestError as exc:
            raise OpenpaiError(self._explain(exc)) from None
        handle = self._handle(spec, name)  # 202: submitted; 409: it exists, re-attach
        return {**handle, "attempt": attempt} if attempt else handle

    async def fetch_output(
        self, handle: TrialHandle, relative: str, scratch: Path, max_bytes: int | None = None
    ) -> Path:
        """The trial's folder on the storage, as the Airflow workers mount it: read in place."""
        return Path(handle["trial_dir"])

    def ended_by_fault(self, update: TrialUpdate) -> bool:
        return update.fault is not None

    async def restart(self, handle: TrialHandle, spec: TrialSpec, attempt: int, resume: Resume | None) -> TrialHandle:
        """A new job for the attempt (``..._a<n>``), its checkpoint fetched onto the storage
        first; a second call for the attempt gets 409 and re-attaches."""
        return {**await self._submit(spec, attempt, resume), "attempt": attempt}

    def _job_path(self, handle: TrialHandle) -> str:
        return f"/jobs/{quote(handle['user'], safe='')}~{quote(handle['job'], safe='')}"

    async def poll(self, handle: TrialHandle, cursor: Cursor) -> TrialUpdate:
        try:
            body = await self._request_json("GET", self._job_path(handle))
        except RestError as exc:
            if exc.status == 404:
                gone = f"job {handle['job']} is gone from OpenPAI"
                return TrialUpdate(TrialStatus.FAILED, [], cursor, gone, fault=gone)
            raise OpenpaiError(self._explain(exc)) from None
        status, code, message = job_status(body)
        if status is TrialStatus.SYS_CANCELED:
            status, message = self._stopped_as(handle, message)
        cursor = dict(cursor)
        metrics, skipped = await asyncio.to_thread(
            read_log_metrics, Path(handle["trial_dir"]), LOG_FILE, cursor, status.is_terminal
        )
        fault = signal_fault(code) if status is TrialStatus.FAILED else None
        message = fault or message  # "killed by signal 9 (exit code 137)" says more than "exit code 137"
        return TrialUpdate(status, metrics, cursor, message, code, skipped, fault)

    def _stopped_as(self, handle: TrialHandle, message: str | None) -> tuple[TrialStatus, str | None]:
        asked = recorded_cancel(Path(handle["trial_dir"]))
        if asked is None:
            return TrialStatus.SYS_CANCELED, message or "stopped on OpenPAI, not by trialflow"
        return asked[0], asked[1] or message

    async def stop(self, handle: TrialHandle, status: TrialStatus, reason: str) -> None:
        await asyncio.to_thread(record_cancel, Path(handle["trial_dir"]), status.value, reason)
        try:
            await self._request("PUT", self._job_path(handle) + "/executionType", json={"value": "STOP"}, accept=(404,))
        except RestError as exc:
            raise OpenpaiError(self._explain(exc)) from None

    async def cleanup(self, experiment_id: str) -> None:
        import shutil

        root = Path(self.config.local_storage_mount_point) / "trialflow" / experiment_id
        await asyncio.to_thread(shutil.rmtree, root, True)

"""An OpenPAI REST server (v2 API, under /rest-server as NNI called it) whose jobs really run.

Follows microsoft/pai's rest-server swagger for the calls trialflow makes:
POST /api/v2/jobs (text/yaml job protocol, 202; 409 when the name exists),
GET /api/v2/jobs/{user}~{job} (jobStatus.state, appExitCode),
PUT /api/v2/jobs/{user}~{job}/executionType ({"value": "STOP"}, 202),
GET /api/v2/jobs?username=, GET /api/v2/virtual-clusters/{vc},
GET /api/v2/storages/{name}; Bearer tokens (401 with OpenPAI's error body).
Each job runs its first task role's commands with the storages of ``extras.storages``
mounted (see tests/helpers/emulators/base.py).
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import unquote

import yaml

from tests.helpers.emulators.base import Emulator, Job, Request, can_run_jobs

__all__ = ["OpenpaiEmulator", "can_run_jobs"]

API = "/rest-server/api/v2"
#: OpenPAI's job states, from the emulator's job states.
STATES = {"waiting": "WAITING", "running": "RUNNING", "stopping": "STOPPING", "stopped": "STOPPED"}


class OpenpaiEmulator(Emulator):
    def __init__(
        self,
        token: str,
        user: str,
        storages: dict[str, tuple[Any, str]],
        virtual_clusters: tuple[str, ...] = ("default",),
        images: dict[str, str] | None = None,
    ):
        super().__init__(storages, images)
        self.token = token
        self.user = user
        self.virtual_clusters = virtual_clusters
        self.submissions: list[str] = []  # every POSTed name, 409s included

    def route(self, r: Request) -> tuple[int, Any]:
        if not r.path.startswith(API + "/"):
            return 404, {"code": "NotFoundError", "message": f"{r.path} not found"}
        if r.headers.get("authorization") != f"Bearer {self.token}":
            return 401, {"code": "UnauthorizedUserError", "message": "Guest is not allowed to do this operation."}
        path = r.path[len(API) :]
        if r.method == "GET" and path.startswith("/virtual-clusters/"):
            vc = unquote(path.split("/", 2)[2])
            if vc in self.virtual_clusters:
                return 200, {"capacity": 100, "status": "RUNNING", "resourcesTotal": {"cpu": 64, "gpu": 0}}
            return 404, {"code": "NoVirtualClusterError", "message": f"Virtual cluster {vc} is not found."}
        if r.method == "GET" and path.startswith("/storages/"):
            name = unquote(path.split("/", 2)[2])
            if name in self.storages:
                return 200, {"name": name, "share": True, "volumeName": name, "type": "nfs"}
            return 404, {"code": "NoStorageError", "message": f"Storage {name} is not found."}
        if r.method == "GET" and path == "/jobs":
            return 200, [{"name": j.name, "username": self.user, "state": self._state(j)} for j in self.jobs.values()]
        if r.method == "POST" and path == "/jobs":
            if not r.headers.get("content-type", "").startswith("text/yaml"):
                return 415, {"code": "UnsupportedMediaTypeError", "message": "job protocol must be text/yaml"}
            return self._submit(yaml.safe_load(r.body.decode()))
        match = re.fullmatch(r"/jobs/([^/~]+)~([^/]+)(/executionType)?", path)
        if match:
            key = f"{unquote(match.group(1))}~{unquote(match.group(2))}"
            job = self.jobs.get(key)
            if job is None:
                return 404, {"code": "NoJobError", "message": f"Job {key} is not found."}
            if r.method == "GET" and not match.group(3):
                return 200, self._detail(job)
            if r.method == "PUT" and match.group(3):
                if json.loads(r.body or b"{}").get("value") != "STOP":
                    return 400, {"code": "InvalidParametersError", "message": "value must be STOP or START"}
                self.stop_job(job)
                return 202, {"message": f"Execute job {key} successfully."}
        return 404, {"code": "NotFoundError", "message": f"{r.method} {path} not found"}

    def _submit(self, protocol: Any) -> tuple[int, Any]:
        if not isinstance(protocol, dict) or protocol.get("protocolVersion") not in (2, "2"):
            return 400, {"code": "InvalidProtocolError", "message": "protocolVersion 2 expected"}
        name = protocol.get("name")
        roles = protocol.get("taskRoles")
        if not isinstance(name, str) or not re.fullmatch(r"[\w.-]{1,255}", name) or not isinstance(roles, dict):
            return 400, {"code": "InvalidProtocolError", "message": "name and taskRoles are required"}
        vc = (protocol.get("defaults") or {}).get("virtualCluster", "default")
        if vc not in self.virtual_clusters:
            return 404, {"code": "NoVirtualClusterError", "message": f"Virtual cluster {vc} is not found."}
        names = [s.get("name") for s in (protocol.get("extras") or {}).get("storages", [])]
        missing = [n for n in names if n not in self.storages]
        if missing:
            return 404, {"code": "NoStorageError", "message": f"Storage {missing[0]} is not found."}
        key = f"{self.user}~{name}"
        with self.lock:
            self.submissions.append(name)
            if key in self.jobs:
                return 409, {"code": "ConflictJobError", "message": f"Job name {name} already exists."}
            job = self.jobs[key] = Job(key, name, protocol)
        role = next(iter(roles.values()))
        images = {p.get("name"): p.get("uri") for p in protocol.get("prerequisites") or []}
        self.run_job(job, "\n".join(role.get("commands") or []), names, images.get(role.get("dockerImage")), {})
        return 202, {"message": f"update job {name} successfully"}

    def _state(self, job: Job) -> str:
        return STATES.get(job.state) or job.state.upper()

    def _detail(self, job: Job) -> dict[str, Any]:
        role = next(iter(job.spec["taskRoles"]))
        return {
            "name": job.name,
            "jobStatus": {
                "username": self.user,
                "state": self._state(job),
                "subState": self._state(job),
                "executionType": "STOP" if job.stopped else "START",
                "retries": 0,
                "createdTime": int(job.created * 1000),
                "completedTime": int(job.completed * 1000) if job.completed else None,
                "appExitCode": job.exit_code,
                "appExitDiagnostics": None if job.exit_code in (None, 0) else f"exit code {job.exit_code}",
            },
            "taskRoles": {role: {"taskRoleStatus": {"name": role}, "taskStatuses": []}},
        }

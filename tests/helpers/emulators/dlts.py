"""A DLTS (DLWorkspace) dashboard whose jobs really run, with the calls NNI's dlts service made.

GET  {dashboard}api/teams/{team}/clusters/{cluster}      -> cluster info with gpu_capacity
POST {dashboard}api/clusters/{cluster}/jobs              -> {"jobId": ...}
GET  {dashboard}api/v2/clusters/{cluster}/jobs/{jobId}   -> {"jobStatus": ..., "jobStatusDetail": [...]}
PUT  {dashboard}api/clusters/{cluster}/jobs/{jobId}/status {"status": "killing"}
Every call carries ``email`` and ``password`` as query parameters (401 otherwise). Each job
runs its ``cmd`` with the work storage mounted (see tests/helpers/emulators/base.py).
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

from tests.helpers.emulators.base import Emulator, Job, Request, can_run_jobs

__all__ = ["DltsEmulator", "can_run_jobs"]

#: DLTS's job statuses, from the emulator's job states.
STATES = {
    "waiting": "queued",
    "running": "running",
    "succeeded": "finished",
    "failed": "failed",
    "stopping": "killing",
    "stopped": "killed",
}
REQUIRED = ("jobName", "team", "vcName", "userName", "image", "cmd", "resourcegpu", "gpuType", "jobtrainingtype")


class DltsEmulator(Emulator):
    def __init__(
        self,
        email: str,
        password: str,
        team: str,
        work_storage: tuple[Any, str],
        cluster: str = ".default",
        gpu_type: str = "P40",
        images: dict[str, str] | None = None,
        prefix: str = "/dashboard/",
    ):
        super().__init__({"work": work_storage}, images)
        self.email, self.password, self.team, self.cluster, self.gpu_type = email, password, team, cluster, gpu_type
        self.prefix = prefix
        self.dashboard = self.host + prefix

    def route(self, r: Request) -> tuple[int, Any]:
        if not r.path.startswith(self.prefix):
            return 404, {"error": "not found"}
        if r.query.get("email") != self.email or r.query.get("password") != self.password:
            return 401, {"error": "Unauthorized: email and password do not match"}
        path = r.path[len(self.prefix) :]
        cluster = re.escape(self.cluster)
        if r.method == "GET" and (m := re.fullmatch(r"api/teams/([^/]+)/clusters/([^/]+)", path)):
            if m.group(1) != self.team or m.group(2) != self.cluster:
                return 404, {"error": f"team {m.group(1)} has no cluster {m.group(2)}"}
            return 200, {"gpu_capacity": {self.gpu_type: 8}, "gpu_avaliable": {self.gpu_type: 8}}
        if r.method == "POST" and path == f"api/clusters/{self.cluster}/jobs":
            return self._submit(json.loads(r.body or b"{}"))
        if m := re.fullmatch(rf"api(/v2)?/clusters/{cluster}/jobs/([^/]+)(/status)?", path):
            job = self.jobs.get(m.group(2))
            if job is None:
                return 404, {"error": f"job {m.group(2)} not found"}
            if r.method == "GET" and m.group(1) and not m.group(3):
                started = [{"startedAt": "2026-11-23T00:00:00Z"}] if job.state != "waiting" else []
                return 200, {
                    "jobId": job.id,
                    "jobName": job.name,
                    "jobStatus": STATES[job.state],
                    "jobStatusDetail": started,
                }
            if r.method == "PUT" and m.group(3) and not m.group(1):
                if json.loads(r.body or b"{}").get("status") != "killing":
                    return 400, {"error": "status must be killing"}
                self.stop_job(job)
                return 200, {"message": "job is being killed"}
        return 404, {"error": f"{r.method} {path} not found"}

    def _submit(self, body: dict[str, Any]) -> tuple[int, Any]:
        missing = [key for key in REQUIRED if key not in body]
        if missing:
            return 400, {"error": f"missing {', '.join(missing)}"}
        if body["team"] != self.team or body["gpuType"] != self.gpu_type or body["userName"] != self.email:
            return 400, {"error": "team, gpuType or userName does not match the cluster"}
        job = Job(uuid.uuid4().hex, body["jobName"], body)
        with self.lock:
            self.jobs[job.id] = job
        self.run_job(job, body["cmd"], ["work"], body["image"], {"DLWS_JOB_ID": job.id})
        return 200, {"jobId": job.id}

"""An OpenPAI REST server (v2 API, under /rest-server as NNI called it) that really runs jobs.

Follows microsoft/pai's rest-server swagger for the calls trialflow makes:
POST /api/v2/jobs (text/yaml job protocol, 202; 409 when the name exists),
GET /api/v2/jobs/{user}~{job} (jobStatus.state, appExitCode),
PUT /api/v2/jobs/{user}~{job}/executionType ({"value": "STOP"}, 202),
GET /api/v2/jobs?username=, GET /api/v2/virtual-clusters/{vc},
GET /api/v2/storages/{name}; Bearer tokens (401 with OpenPAI's error body).

Each job's commands run as a local process in its own mount namespace, in which
the storage's local folder is bind-mounted over the job's
containerStorageMountPoint (a folder that stays empty outside): the paths the
job sees are the container's, as on a real cluster. Needs root (unshare).

``faults`` injects answers: each entry (method, path regex, action) is used once;
an action is ``(status, headers, body)`` or ``"drop"`` (the connection closes
with no answer).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import yaml

API = "/rest-server/api/v2"


def can_run_jobs() -> str | None:
    """Why jobs cannot run here (None: they can)."""
    if os.geteuid() != 0:
        return "the OpenPAI emulator's jobs need root (a mount namespace with a bind mount)"
    if shutil.which("unshare") is None:
        return "unshare (util-linux) is not installed"
    return None


@dataclass
class Job:
    user: str
    name: str
    protocol: dict[str, Any]
    state: str = "WAITING"
    exit_code: int | None = None
    process: subprocess.Popen | None = None
    created: float = field(default_factory=time.time)
    completed: float | None = None
    stopped_by_user: bool = False


class OpenpaiEmulator:
    def __init__(
        self,
        token: str,
        user: str,
        storages: dict[str, tuple[Path, str]],
        virtual_clusters: tuple[str, ...] = ("default",),
        images: dict[str, str] | None = None,
    ):
        """``storages``: storage config name -> (the folder jobs' storage is, the path jobs mount
        it at). ``images``: docker image uri -> a bin folder standing in for the image (first on
        the job's PATH: e.g. the nni==3.0 virtualenv for msranni/nni)."""
        self.images = images or {}
        self.token = token
        self.user = user
        self.storages = storages
        self.virtual_clusters = virtual_clusters
        self.jobs: dict[str, Job] = {}
        self.submissions: list[str] = []  # every POSTed name, 409s included
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self.faults: list[tuple[str, str, Any]] = []
        self.lock = threading.Lock()
        emulator = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                emulator._serve(self, "GET")

            def do_POST(self) -> None:
                emulator._serve(self, "POST")

            def do_PUT(self) -> None:
                emulator._serve(self, "PUT")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.host = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)

    def __enter__(self) -> OpenpaiEmulator:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        for job in list(self.jobs.values()):
            self._kill(job)
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=10)

    # -- HTTP ----------------------------------------------------------------------------------

    def _serve(self, h: BaseHTTPRequestHandler, method: str) -> None:
        url = urlsplit(h.path)
        length = int(h.headers.get("Content-Length") or 0)
        body = h.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in h.headers.items()}
        with self.lock:
            self.requests.append((method, url.path, headers))
            fault = next((f for f in self.faults if f[0] == method and re.search(f[1], url.path)), None)
            if fault is not None:
                self.faults.remove(fault)
        if fault is not None:
            action = fault[2]
            if action == "drop":
                h.close_connection = True
                h.connection.shutdown(2)
                return
            status, extra, payload = action
            return self._send(h, status, payload, extra)
        if not url.path.startswith(API + "/"):
            return self._send(h, 404, {"code": "NotFoundError", "message": f"{url.path} not found"})
        if headers.get("authorization") != f"Bearer {self.token}":
            return self._send(
                h, 401, {"code": "UnauthorizedUserError", "message": "Guest is not allowed to do this operation."}
            )
        path = url.path[len(API) :]
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        try:
            status, payload = self._route(method, path, query, headers, body)
        except Exception as exc:  # an emulator bug must show, not hang the client
            status, payload = 500, {"code": "UnknownError", "message": repr(exc)}
        self._send(h, status, payload)

    def _send(self, h: BaseHTTPRequestHandler, status: int, payload: Any, extra: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode() if payload is not None else b""
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        for key, value in (extra or {}).items():
            h.send_header(key, value)
        h.end_headers()
        h.wfile.write(data)

    def _route(
        self, method: str, path: str, query: dict[str, str], headers: dict[str, str], body: bytes
    ) -> tuple[int, Any]:
        if method == "GET" and path.startswith("/virtual-clusters/"):
            vc = unquote(path.split("/", 2)[2])
            if vc in self.virtual_clusters:
                return 200, {"capacity": 100, "status": "RUNNING", "resourcesTotal": {"cpu": 64, "gpu": 0}}
            return 404, {"code": "NoVirtualClusterError", "message": f"Virtual cluster {vc} is not found."}
        if method == "GET" and path.startswith("/storages/"):
            name = unquote(path.split("/", 2)[2])
            if name in self.storages:
                return 200, {"name": name, "share": True, "volumeName": name, "type": "nfs"}
            return 404, {"code": "NoStorageError", "message": f"Storage {name} is not found."}
        if method == "GET" and path == "/jobs":
            jobs = [self._summary(j) for j in self.jobs.values() if j.user == query.get("username", j.user)]
            return 200, jobs
        if method == "POST" and path == "/jobs":
            if not headers.get("content-type", "").startswith("text/yaml"):
                return 415, {"code": "UnsupportedMediaTypeError", "message": "job protocol must be text/yaml"}
            return self._submit(yaml.safe_load(body.decode()))
        match = re.fullmatch(r"/jobs/([^/~]+)~([^/]+)(/executionType)?", path)
        if match:
            key = f"{unquote(match.group(1))}~{unquote(match.group(2))}"
            job = self.jobs.get(key)
            if job is None:
                return 404, {"code": "NoJobError", "message": f"Job {key} is not found."}
            if method == "GET" and not match.group(3):
                return 200, self._detail(job)
            if method == "PUT" and match.group(3):
                if json.loads(body or b"{}").get("value") != "STOP":
                    return 400, {"code": "InvalidParametersError", "message": "value must be STOP or START"}
                self._stop(job)
                return 202, {"message": f"Execute job {key} successfully."}
        return 404, {"code": "NotFoundError", "message": f"{method} {path} not found"}

    # -- jobs ----------------------------------------------------------------------------------

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
            job = self.jobs[key] = Job(self.user, name, protocol)
        self._start(job, names)
        return 202, {"message": f"update job {name} successfully"}

    def _start(self, job: Job, storage_names: list[str]) -> None:
        role = next(iter(job.protocol["taskRoles"].values()))
        script = "\n".join(role.get("commands") or [])
        binds = []
        for name in storage_names:
            source, target = self.storages[name]
            binds.append(f"mkdir -p {_q(target)} && mount --bind {_q(str(source))} {_q(target)}")
        inner = " && ".join([*binds, f"exec sh -c {_q(script)}"])
        # A container's environment, not the test process's: only what an image would have.
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/root", "LANG": "C.UTF-8"}
        for prerequisite in job.protocol.get("prerequisites") or []:
            if prerequisite.get("name") == role.get("dockerImage") and prerequisite.get("uri") in self.images:
                env["PATH"] = f"{self.images[prerequisite['uri']]}:{env.get('PATH', '')}"
        job.process = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", inner],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            env=env,
        )
        job.state = "RUNNING"
        threading.Thread(target=self._reap, args=(job,), daemon=True).start()

    def _reap(self, job: Job) -> None:
        assert job.process is not None
        code = job.process.wait()
        with self.lock:
            job.exit_code = code if code >= 0 else 128 - code
            job.completed = time.time()
            if job.stopped_by_user:
                job.state = "STOPPED"
            else:
                job.state = "SUCCEEDED" if code == 0 else "FAILED"

    def _stop(self, job: Job) -> None:
        with self.lock:
            if job.state not in ("WAITING", "RUNNING"):
                return
            job.stopped_by_user = True
            job.state = "STOPPING"
        self._kill(job)

    def _kill(self, job: Job) -> None:
        if job.process is None or job.process.poll() is not None:
            return
        try:
            os.killpg(job.process.pid, signal.SIGTERM)
            job.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(job.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def _summary(self, job: Job) -> dict[str, Any]:
        return {
            "name": job.name,
            "username": job.user,
            "state": job.state,
            "executionType": "STOP" if job.stopped_by_user else "START",
            "createdTime": int(job.created * 1000),
            "completedTime": int(job.completed * 1000) if job.completed else None,
            "appExitCode": job.exit_code,
            "virtualCluster": (job.protocol.get("defaults") or {}).get("virtualCluster", "default"),
        }

    def _detail(self, job: Job) -> dict[str, Any]:
        role = next(iter(job.protocol["taskRoles"]))
        return {
            "name": job.name,
            "jobStatus": {
                "username": job.user,
                "state": job.state,
                "subState": job.state,
                "executionType": "STOP" if job.stopped_by_user else "START",
                "retries": 0,
                "createdTime": int(job.created * 1000),
                "completedTime": int(job.completed * 1000) if job.completed else None,
                "appExitCode": job.exit_code,
                "appExitDiagnostics": None if job.exit_code in (None, 0) else f"exit code {job.exit_code}",
            },
            "taskRoles": {role: {"taskRoleStatus": {"name": role}, "taskStatuses": []}},
        }


def _q(text: str) -> str:
    import shlex

    return shlex.quote(text)

"""What every service emulator shares: an HTTP server on 127.0.0.1 with injectable faults and
a request log, and jobs that really run as local processes.

A job runs in its own mount namespace where each storage's local folder is bind-mounted over
the path the job mounts it at (a folder that stays empty outside), so the job sees the paths a
container would. An image is stood in for by a bin folder first on the job's PATH; the job's
environment is only what an image would have, not the test process's.

``faults`` answers requests instead of the service: each entry (method, path regex, action) is
used once; an action is ``(status, headers, body)`` or ``"drop"`` (the connection closes with
no answer).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


def can_run_jobs() -> str | None:
    """Why emulated jobs cannot run here (None: they can)."""
    if os.geteuid() != 0:
        return "emulated jobs need root (a mount namespace with a bind mount)"
    if shutil.which("unshare") is None:
        return "unshare (util-linux) is not installed"
    return None


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes


@dataclass
class Job:
    id: str
    name: str
    spec: Any
    state: str = "waiting"
    exit_code: int | None = None
    process: subprocess.Popen | None = None
    created: float = field(default_factory=time.time)
    completed: float | None = None
    stopped: bool = False
    done: threading.Event = field(default_factory=threading.Event)


class Emulator:
    """Subclasses answer :meth:`route`; jobs go through :meth:`run_job` and :meth:`kill_job`."""

    def __init__(
        self,
        storages: dict[str, tuple[Any, str]],
        images: dict[str, str] | None = None,
        tls: tuple[str, str] | None = None,
    ):
        """``storages``: name -> (the folder a job's storage is, the path the job mounts it at).
        ``images``: image -> a bin folder standing in for it. ``tls``: (certificate, key) files:
        serve HTTPS (Azure's clients refuse bearer tokens over plain HTTP)."""
        self.storages = storages
        self.images = images or {}
        self.jobs: dict[str, Job] = {}
        self.requests: list[Request] = []
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
        scheme = "http"
        if tls is not None:
            import ssl

            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
            scheme = "https"
        self.host = f"{scheme}://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)

    def __enter__(self) -> Emulator:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        for job in list(self.jobs.values()):
            self.kill_job(job)
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=10)

    def route(self, request: Request) -> tuple[int, Any]:
        raise NotImplementedError

    # -- HTTP ----------------------------------------------------------------------------------

    def _serve(self, h: BaseHTTPRequestHandler, method: str) -> None:
        url = urlsplit(h.path)
        length = int(h.headers.get("Content-Length") or 0)
        request = Request(
            method,
            url.path,
            {k: v[0] for k, v in parse_qs(url.query).items()},
            {k.lower(): v for k, v in h.headers.items()},
            h.rfile.read(length) if length else b"",
        )
        with self.lock:
            self.requests.append(request)
            fault = next((f for f in self.faults if f[0] == method and re.search(f[1], url.path)), None)
            if fault is not None:
                self.faults.remove(fault)
        if fault is not None:
            if fault[2] == "drop":
                h.close_connection = True
                h.connection.shutdown(2)
                return
            status, extra, payload = fault[2]
            return self._send(h, status, payload, extra)
        try:
            status, payload = self.route(request)
        except Exception as exc:  # an emulator bug must show, not hang the client
            status, payload = 500, {"message": repr(exc)}
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

    # -- jobs ----------------------------------------------------------------------------------

    def run_job(self, job: Job, script: str, storages: list[str], image: str | None, env: dict[str, str]) -> None:
        binds = [
            f"mkdir -p {shlex.quote(target)} && mount --bind {shlex.quote(str(source))} {shlex.quote(target)}"
            for source, target in (self.storages[name] for name in storages)
        ]
        inner = " && ".join([*binds, f"exec sh -c {shlex.quote(script)}"])
        path = "/usr/local/bin:/usr/bin:/bin"
        if image in self.images:
            path = f"{self.images[image]}:{path}"
        job.process = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", inner],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            env={"PATH": path, "HOME": "/root", "LANG": "C.UTF-8", **env},
        )
        job.state = "running"
        threading.Thread(target=self._reap, args=(job,), daemon=True).start()

    def _reap(self, job: Job) -> None:
        assert job.process is not None
        code = job.process.wait()
        with self.lock:
            job.exit_code = code if code >= 0 else 128 - code
            job.completed = time.time()
            job.state = "stopped" if job.stopped else ("succeeded" if code == 0 else "failed")
        job.done.set()

    def stop_job(self, job: Job) -> bool:
        """Stop a running job; False when it had already ended."""
        with self.lock:
            if job.state not in ("waiting", "running"):
                return False
            job.stopped = True
            job.state = "stopping"
        threading.Thread(target=self.kill_job, args=(job,), daemon=True).start()
        return True

    def kill_job(self, job: Job) -> None:
        if job.process is None or job.process.poll() is not None:
            return
        try:
            os.killpg(job.process.pid, signal.SIGTERM)
            job.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(job.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

"""A real kube-apiserver + etcd on 127.0.0.1, for the Kubernetes platform tests.

kube-apiserver is built from Debian's source package by build-apiserver.sh
(cached per machine under ~/.cache/trialflow/kube); etcd is Debian's. Nothing
listens beyond loopback; everything started here is stopped by ``stop()``.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import ssl
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import yaml

CACHE = Path(os.environ.get("TRIALFLOW_KUBE_CACHE", Path.home() / ".cache" / "trialflow" / "kube"))
TOKEN = "trialflow-test-admin-token"


def apiserver_binary() -> Path | None:
    found = sorted(glob.glob(str(CACHE / "*" / "kube-apiserver")))
    return Path(found[-1]) if found else None


def missing_reason() -> str | None:
    """Why the cluster cannot start here, or None."""
    if apiserver_binary() is None:
        return f"no kube-apiserver under {CACHE}: run tests/helpers/kube/build-apiserver.sh (CI does)"
    if shutil.which("etcd") is None:
        return "etcd is not installed (Debian etcd-server; tests/helpers/kube/build-apiserver.sh installs it)"
    if shutil.which("openssl") is None:
        return "openssl is not installed"
    return None


def free_ports(n: int) -> list[int]:
    """n distinct free ports on 127.0.0.1 (held open together, so none is handed out twice)."""
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


@dataclass
class KubeCluster:
    root: Path
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)
    _apiserver_command: list[str] = field(default_factory=list)
    port: int = 0
    etcd_port: int = 0

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def kubeconfig(self) -> Path:
        return self.root / "kubeconfig"

    def kubeconfig_dict(self, token: str = TOKEN) -> dict:
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "test",
            "clusters": [{"name": "test", "cluster": {"server": self.server, "insecure-skip-tls-verify": True}}],
            "users": [{"name": "admin", "user": {"token": token}}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": "admin", "namespace": "default"}}],
        }

    def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.etcd_port, peer, self.port, metrics_port = free_ports(4)
        etcd_url, peer_url = f"http://127.0.0.1:{self.etcd_port}", f"http://127.0.0.1:{peer}"
        logs = self.root / "logs"
        logs.mkdir(exist_ok=True)
        self.processes["etcd"] = subprocess.Popen(
            [
                "etcd",
                "--data-dir",
                str(self.root / "etcd"),
                "--listen-client-urls",
                etcd_url,
                "--advertise-client-urls",
                etcd_url,
                "--listen-peer-urls",
                peer_url,
                "--initial-advertise-peer-urls",
                peer_url,
                "--initial-cluster",
                f"default={peer_url}",
                "--listen-metrics-urls",
                f"http://127.0.0.1:{metrics_port}",
            ],
            stdout=open(logs / "etcd.log", "wb"),
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        sa_key = self.root / "sa.key"
        subprocess.run(["openssl", "genrsa", "-out", str(sa_key), "2048"], check=True, capture_output=True)
        subprocess.run(
            ["openssl", "rsa", "-in", str(sa_key), "-pubout", "-out", str(self.root / "sa.pub")],
            check=True,
            capture_output=True,
        )
        (self.root / "tokens.csv").write_text(f'{TOKEN},admin,admin,"system:masters"\n')
        self._apiserver_command = [
            str(apiserver_binary()),
            f"--etcd-servers={etcd_url}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={self.port}",
            "--insecure-port=0",
            f"--cert-dir={self.root / 'certs'}",
            f"--token-auth-file={self.root / 'tokens.csv'}",
            "--authorization-mode=RBAC",
            f"--service-account-key-file={self.root / 'sa.pub'}",
            f"--service-account-signing-key-file={sa_key}",
            "--service-account-issuer=https://kubernetes.default.svc",
            "--api-audiences=https://kubernetes.default.svc",
            "--service-cluster-ip-range=10.96.0.0/24",
            "--endpoint-reconciler-type=none",
            "--kubelet-preferred-address-types=InternalIP",
            "--profiling=false",
        ]
        self._start_apiserver()
        self.kubeconfig.write_text(yaml.safe_dump(self.kubeconfig_dict()))
        try:
            self._wait_ready()
        except BaseException:
            self.stop()  # never leave a half-started server behind
            raise

    def _start_apiserver(self) -> None:
        self.processes["kube-apiserver"] = subprocess.Popen(
            self._apiserver_command,
            stdout=open(self.root / "logs" / "kube-apiserver.log", "ab"),
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )

    def restart_apiserver(self, down: float = 0.0) -> None:
        """Stop the API server (etcd keeps the cluster's state), wait ``down`` seconds, start it
        again on the same address, and wait until it is ready."""
        proc = self.processes["kube-apiserver"]
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        time.sleep(down)
        self._start_apiserver()
        self._wait_ready()

    def _wait_ready(self, timeout: float = 90) -> None:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            for name, proc in self.processes.items():
                if proc.poll() is not None:
                    tail = (self.root / "logs" / f"{name}.log").read_text(errors="replace")[-2000:]
                    raise RuntimeError(f"{name} exited ({proc.returncode}):\n{tail}")
            try:
                request = urllib.request.Request(f"{self.server}/readyz", headers={"Authorization": f"Bearer {TOKEN}"})
                with urllib.request.urlopen(request, context=context, timeout=2) as response:
                    if response.status == 200:
                        return
            except Exception as exc:  # not up yet
                last = str(exc)
            time.sleep(0.3)
        raise RuntimeError(f"kube-apiserver not ready in {timeout} s: {last}")

    def metrics(self) -> str:
        """The API server's Prometheus metrics (request counts for the benchmark)."""
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        request = urllib.request.Request(f"{self.server}/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
        with urllib.request.urlopen(request, context=context, timeout=10) as response:
            return response.read().decode()

    def stop(self) -> None:
        for name in ("kube-apiserver", "etcd"):
            proc = self.processes.get(name)
            if proc is None or proc.poll() is not None:
                continue
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)

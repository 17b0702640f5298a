"""Test code: the operators and the kubelet that a real cluster would have.

No operator or kubelet can run here, so this controller does their part
against the real API server: it lists the five job kinds, creates each
replica's Pod (bound to a Node whose kubelet is a small HTTPS server here, so
``pods/NAME/log`` goes through the API server's real proxy path), runs the
container's command as a local process with the pod's volumes bind-mounted at
their mountPaths in a private mount namespace (ConfigMaps written out,
emptyDirs made, NFS/PVC/Azure Files volumes mapped to local folders), and
writes status the way each operator does (platform-apis.md). Every loop is
bounded by ``stop()``; every process it starts is killed by it.
"""

from __future__ import annotations

import base64
import os
import shlex
import signal
import ssl
import subprocess
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.rest import ApiException

NODE = "trialflow-test-node"

CRD_KINDS = {
    "TFJob": ("kubeflow.org", "v1", "tfjobs"),
    "PyTorchJob": ("kubeflow.org", "v1", "pytorchjobs"),
    "TrainJob": ("trainer.kubeflow.org", "v1alpha1", "trainjobs"),
    "Framework": ("frameworkcontroller.microsoft.com", "v1", "frameworks"),
    "AdaptDLJob": ("adaptdl.petuum.com", "v1", "adaptdljobs"),
}


def crd(kind: str) -> dict[str, Any]:
    """The project's own minimal CRD for a kind: any spec, a status subresource."""
    group, version, plural = CRD_KINDS[kind]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": plural, "singular": kind.lower(), "kind": kind, "listKind": f"{kind}List"},
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
                    "subresources": {"status": {}},
                }
            ],
        },
    }


def install_crd(api_client: k8s.ApiClient, kind: str, timeout: float = 20) -> None:
    ext = k8s.ApiextensionsV1Api(api_client)
    try:
        ext.create_custom_resource_definition(crd(kind))
    except ApiException as exc:
        if exc.status != 409:
            raise
    name = crd(kind)["metadata"]["name"]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        conditions = ext.read_custom_resource_definition(name).status.conditions or []
        if any(c.type == "Established" and c.status == "True" for c in conditions):
            # the discovery document can lag a moment behind Established
            group, version, plural = CRD_KINDS[kind]
            try:
                k8s.CustomObjectsApi(api_client).list_namespaced_custom_object(group, version, "default", plural)
                return
            except ApiException:
                pass
        time.sleep(0.1)
    raise TimeoutError(f"CRD {name} not established")


def delete_crd(api_client: k8s.ApiClient, kind: str, timeout: float = 30) -> None:
    ext = k8s.ApiextensionsV1Api(api_client)
    name = crd(kind)["metadata"]["name"]
    try:
        ext.delete_custom_resource_definition(name)
    except ApiException as exc:
        if exc.status != 404:
            raise
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            ext.read_custom_resource_definition(name)
        except ApiException as exc:
            if exc.status == 404:
                return
        time.sleep(0.1)
    raise TimeoutError(f"CRD {name} not deleted")


def now_rfc3339(nanos: bool = False) -> str:
    t = datetime.now(UTC)
    if nanos:
        return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond:06d}000Z"
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


# -- the fake kubelet ---------------------------------------------------------------------------


class Kubelet:
    """Serves ``/containerLogs/NS/POD/CONTAINER`` over HTTPS on 127.0.0.1 from the captured output,
    honouring ``timestamps`` and ``sinceTime`` as the real kubelet does."""

    def __init__(self, root: Path):
        self.root = root
        self.logs: dict[tuple[str, str, str], Path] = {}
        self.requests = 0
        cert, key = root / "kubelet.crt", root / "kubelet.key"
        subprocess.run(
            [
                "openssl",
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                str(key),
                "-out",
                str(cert),
                "-days",
                "1",
                "-subj",
                "/CN=127.0.0.1",
            ],
            check=True,
            capture_output=True,
        )
        kubelet = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                kubelet.requests += 1
                url = urlparse(self.path)
                parts = url.path.strip("/").split("/")
                if len(parts) != 4 or parts[0] != "containerLogs":
                    self.send_error(404)
                    return
                path = kubelet.logs.get((parts[1], parts[2], parts[3]))
                if path is None:
                    self.send_error(404, "container not found")
                    return
                query = parse_qs(url.query)
                since = query.get("sinceTime", [None])[0]
                stamps = query.get("timestamps", ["false"])[0] == "true"
                out = []
                for line in path.read_text(errors="replace").splitlines(keepends=True):
                    ts, _, text = line.partition(" ")
                    if since and ts[:19] < since[:19]:
                        continue
                    out.append(line if stamps else text)
                body = "".join(out).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(cert), str(key))
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


# -- replicas -----------------------------------------------------------------------------------


@dataclass
class Replica:
    role: str
    index: int
    pod: str
    labels: dict[str, str]
    pod_spec: dict[str, Any]
    proc: subprocess.Popen | None = None
    log: Path | None = None
    exit_code: int | None = None
    reader: threading.Thread | None = None
    #: What the kubelet would say ended it, when a test plays a fault (evict()).
    evicted: bool = False

    @property
    def container(self) -> dict[str, Any]:
        return self.pod_spec["containers"][0]


@dataclass
class Job:
    kind: str
    name: str
    uid: str
    replicas: list[Replica]
    status: dict[str, Any] = field(default_factory=dict)
    done: bool = False
    stopped: bool = False


class TestController:
    __test__ = False  # test code, not a test: pytest leaves it alone where a test module imports it

    def __init__(
        self,
        kubeconfig: Path,
        root: Path,
        namespace: str = "default",
        storage: dict[tuple[str, ...], Path] | None = None,
        path_prefix: str | None = None,
        start_delay: float = 0.0,
        interval: float = 0.1,
        delete_fc_pods: bool = True,
    ):
        self.root = root
        self.namespace = namespace
        self.storage = storage or {}
        self.path_prefix = path_prefix
        self.start_delay = start_delay
        self.interval = interval
        self.delete_fc_pods = delete_fc_pods
        self.api_client = k8s_config.new_client_from_config(str(kubeconfig))
        self.custom = k8s.CustomObjectsApi(self.api_client)
        self.core = k8s.CoreV1Api(self.api_client)
        self.jobs: dict[str, Job] = {}
        root.mkdir(parents=True, exist_ok=True)
        self.kubelet = Kubelet(root)
        self.completed_at: dict[str, float] = {}
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="test-controller", daemon=True)
        self._lock = threading.Lock()
        self.paused = False
        self.made_dirs: list[str] = []
        #: Folders "in the image": path inside the container -> local folder bound there.
        self.image_files: dict[str, Path] = {}

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> TestController:
        self.kubelet.start()
        try:
            self._register()
        except BaseException:
            self.kubelet.stop()  # never leave the kubelet listening after a failed start
            raise
        self._thread.start()
        return self

    def _register(self) -> None:
        """The CRDs, the Node with its kubelet endpoint, the default ServiceAccount."""
        for kind in CRD_KINDS:
            install_crd(self.api_client, kind)
        node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}}
        try:
            self.core.create_node(node)
        except ApiException as exc:
            if exc.status != 409:
                raise
        self.core.patch_node_status(
            NODE,
            {
                "status": {
                    "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
                    "daemonEndpoints": {"kubeletEndpoint": {"Port": self.kubelet.port}},
                    "conditions": [
                        {
                            "type": "Ready",
                            "status": "True",
                            "reason": "KubeletReady",
                            "lastHeartbeatTime": now_rfc3339(),
                            "lastTransitionTime": now_rfc3339(),
                        }
                    ],
                }
            },
        )
        try:
            self.core.create_namespaced_service_account(self.namespace, {"metadata": {"name": "default"}})
        except ApiException as exc:
            if exc.status != 409:
                raise

    def stop(self) -> None:
        """Stops the loop and kills every job's processes; a second call does nothing (the
        session may stop the controller after its last test, then its fixture ends)."""
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join(15)
        with self._lock:
            for job in self.jobs.values():
                self._kill(job)
        self.kubelet.stop()
        self.api_client.close()
        for folder in sorted(set(self.made_dirs), key=len, reverse=True):
            try:
                os.rmdir(folder)
            except OSError:
                pass

    def _loop(self) -> None:
        while not self._stop.is_set():
            if not self.paused:
                try:
                    self.tick()
                except Exception as exc:  # keep going; the test reads .errors
                    self.errors.append(f"{exc!r} {getattr(exc, 'body', '')}"[:500])
            self._stop.wait(self.interval)

    # -- one pass ---------------------------------------------------------------------------

    def tick(self) -> None:
        with self._lock:
            seen: set[str] = set()
            for kind, (group, version, plural) in CRD_KINDS.items():
                try:
                    items = self.custom.list_namespaced_custom_object(group, version, self.namespace, plural)["items"]
                except ApiException as exc:
                    if exc.status == 404:  # a test removed this CRD
                        continue
                    raise
                for obj in items:
                    uid = obj["metadata"]["uid"]
                    seen.add(uid)
                    job = self.jobs.get(uid)
                    if job is None:
                        created = obj["metadata"].get("creationTimestamp")
                        age = (
                            time.time()
                            - datetime.strptime(created, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
                            if created
                            else 99
                        )
                        if age < self.start_delay:
                            continue
                        self.jobs[uid] = job = self._launch(kind, obj)
                    self._reconcile(job, obj)
            for uid, job in list(self.jobs.items()):
                if uid not in seen and not job.stopped:  # deleted (cancel or cleanup): what GC would do
                    self._kill(job)
                    self._delete_pods(job)
                    job.stopped = job.done = True

    # -- creating replicas ------------------------------------------------------------------

    def _replicas(self, kind: str, obj: dict[str, Any]) -> list[Replica]:
        name, spec = obj["metadata"]["name"], obj["spec"]
        out: list[Replica] = []
        if kind in ("TFJob", "PyTorchJob"):
            key = "tfReplicaSpecs" if kind == "TFJob" else "pytorchReplicaSpecs"
            for rtype, rs in spec[key].items():
                for i in range(int(rs.get("replicas", 1))):
                    template = rs["template"]
                    labels = {
                        **template.get("metadata", {}).get("labels", {}),
                        "training.kubeflow.org/job-name": name,
                        "training.kubeflow.org/replica-type": rtype.lower(),
                        "training.kubeflow.org/replica-index": str(i),
                    }
                    out.append(Replica(rtype, i, f"{name}-{rtype.lower()}-{i}", labels, template["spec"]))
        elif kind == "Framework":
            for role in spec["taskRoles"]:
                for i in range(int(role.get("taskNumber", 1))):
                    pod = role["task"]["pod"]
                    labels = {
                        **pod.get("metadata", {}).get("labels", {}),
                        "FC_FRAMEWORK_NAME": name,
                        "FC_TASKROLE_NAME": role["name"],
                        "FC_TASK_INDEX": str(i),
                    }
                    out.append(Replica(role["name"], i, f"{name}-{role['name']}-{i}", labels, pod["spec"]))
        elif kind == "AdaptDLJob":
            template = spec["template"]
            labels = {**template.get("metadata", {}).get("labels", {}), "adaptdl/job": name, "adaptdl/replica": "0"}
            out.append(Replica("main", 0, f"{name}-{obj['metadata']['uid'][:5]}-0-0", labels, template["spec"]))
        elif kind == "TrainJob":
            trainer = spec.get("trainer") or {}
            override = (spec.get("podTemplateOverrides") or [{}])[0]
            o_spec = override.get("spec") or {}
            mounts = (o_spec.get("containers") or [{}])[0].get("volumeMounts", [])
            container = {
                "name": "node",
                "image": trainer.get("image", "runtime-image"),
                "command": trainer.get("command", []),
                "args": trainer.get("args", []),
                "env": trainer.get("env", []),
                "volumeMounts": mounts,
            }
            pod_spec = {"containers": [container], "volumes": o_spec.get("volumes", []), "restartPolicy": "Never"}
            for i in range(int(trainer.get("numNodes", 1))):
                labels = {
                    **(override.get("metadata") or {}).get("labels", {}),
                    "jobset.sigs.k8s.io/jobset-name": name,
                    "jobset.sigs.k8s.io/replicatedjob-name": "node",
                    "batch.kubernetes.io/job-completion-index": str(i),
                }
                out.append(Replica("node", i, f"{name}-node-0-{i}-{obj['metadata']['uid'][:5]}", labels, pod_spec))
        return out

    def _launch(self, kind: str, obj: dict[str, Any]) -> Job:
        job = Job(kind, obj["metadata"]["name"], obj["metadata"]["uid"], self._replicas(kind, obj))
        for replica in job.replicas:
            self._create_pod(job, replica)
            self._start(job, replica)
        job.status = self._initial_status(kind, job)
        self._write_status(job)
        return job

    def _create_pod(self, job: Job, replica: Replica) -> None:
        c = replica.container
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": replica.pod,
                "labels": replica.labels,
                "ownerReferences": [{"apiVersion": "v1", "kind": job.kind, "name": job.name, "uid": job.uid}],
            },
            "spec": {
                "nodeName": NODE,
                "restartPolicy": "Never",
                "automountServiceAccountToken": False,
                "containers": [
                    {"name": c["name"], "image": c.get("image") or "image", "command": c.get("command", [])}
                ],
            },
        }
        try:
            self.core.create_namespaced_pod(self.namespace, body)
        except ApiException as exc:
            if exc.status != 409:
                raise
        self._pod_phase(replica, "Running")

    def _pod_phase(self, replica: Replica, phase: str) -> None:
        try:
            self.core.patch_namespaced_pod_status(replica.pod, self.namespace, {"status": {"phase": phase}})
        except ApiException as exc:
            if exc.status != 404:
                raise

    def _pod_ended(self, replica: Replica) -> None:
        """The kubelet's report of an ended container: its exit code (128 + the signal, as the
        runtime gives it for a killed process) and reason, and the pod's own reason when it was
        evicted."""
        code = replica.exit_code or 0
        code = 128 - code if code < 0 else code
        t = now_rfc3339()
        status: dict[str, Any] = {
            "phase": "Succeeded" if code == 0 else "Failed",
            "containerStatuses": [
                {
                    "name": replica.container["name"],
                    "image": replica.container.get("image") or "image",
                    "imageID": "",
                    "ready": False,
                    "restartCount": 0,
                    "state": {
                        "terminated": {
                            "exitCode": code,
                            "reason": "Completed" if code == 0 else "Error",
                            "startedAt": t,
                            "finishedAt": t,
                        }
                    },
                }
            ],
        }
        if replica.evicted:
            status.update(reason="Evicted", message="The node was low on resource: memory.")
        try:
            self.core.patch_namespaced_pod_status(replica.pod, self.namespace, {"status": status})
        except ApiException as exc:
            if exc.status != 404:
                raise

    def evict(self, name: str, signum: int = signal.SIGKILL) -> None:
        """What the kubelet does to a pod of job ``name`` under memory pressure: its process is
        killed and the pod marked Evicted (a fault: the trial did not end itself)."""
        job = self.job(name)
        assert job is not None, f"no job {name}"
        replica = job.replicas[0]
        replica.evicted = True
        if replica.proc is not None and replica.proc.poll() is None:
            os.killpg(replica.proc.pid, signum)

    def _volume_source(self, replica: Replica, volume: dict[str, Any]) -> Path:
        folder = self.root / "pods" / replica.pod
        if "configMap" in volume:
            target = folder / f"cm-{volume['name']}"
            target.mkdir(parents=True, exist_ok=True)
            cm = self.core.read_namespaced_config_map(volume["configMap"]["name"], self.namespace)
            for key, text in (cm.data or {}).items():
                (target / key).write_text(text)
            for key, b64 in (cm.binary_data or {}).items():
                (target / key).write_bytes(base64.b64decode(b64))
            return target
        if "emptyDir" in volume:
            target = folder / f"empty-{volume['name']}"
            target.mkdir(parents=True, exist_ok=True)
            return target
        if "nfs" in volume:
            key: tuple[str, ...] = ("nfs", volume["nfs"]["server"], volume["nfs"]["path"])
        elif "persistentVolumeClaim" in volume:
            key = ("pvc", volume["persistentVolumeClaim"]["claimName"])
        elif "azureFile" in volume:
            key = ("azureFile", volume["azureFile"]["shareName"])
        else:
            raise ValueError(f"volume {volume} is not supported by the test controller")
        if key not in self.storage:
            raise ValueError(f"volume {key} has no local folder in this test")
        return self.storage[key]

    def _start(self, job: Job, replica: Replica) -> None:
        c = replica.container
        volumes = {v["name"]: v for v in replica.pod_spec.get("volumes", [])}
        binds: list[str] = []
        for mount in c.get("volumeMounts", []):
            source = self._volume_source(replica, volumes[mount["name"]])
            self._mount_point(mount["mountPath"])
            q_src, q_dst = shlex.quote(str(source)), shlex.quote(mount["mountPath"])
            binds.append(f"mount --bind {q_src} {q_dst}")
            if mount.get("readOnly"):
                binds.append(f"mount -o remount,bind,ro {q_dst}")
        for inside, local in self.image_files.items():
            self._mount_point(inside)
            binds.insert(0, f"mount --bind {shlex.quote(str(local))} {shlex.quote(inside)}")
        env = {e["name"]: e.get("value", "") for e in c.get("env", [])}
        env.update(
            {
                "HOSTNAME": replica.pod,
                "HOME": str(self.root),
                "PATH": (self.path_prefix + ":" if self.path_prefix else "") + os.environ.get("PATH", ""),
            }
        )
        command = list(c.get("command", [])) + list(c.get("args", []))
        script = " && ".join(binds + ['exec "$@"'])
        replica.log = self.root / "pods" / replica.pod / "container.log"
        replica.log.parent.mkdir(parents=True, exist_ok=True)
        replica.log.touch()
        self.kubelet.logs[(self.namespace, replica.pod, c["name"])] = replica.log
        replica.proc = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "container", *command],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        replica.reader = threading.Thread(target=self._capture, args=(replica,), daemon=True)
        replica.reader.start()

    def _mount_point(self, path: str) -> None:
        """Make the mount point in the host's view, remembering what was made so stop() can
        remove it (an empty /tmp/mount left behind would change what other tests see)."""
        missing = []
        folder = Path(path)
        while not folder.exists():
            missing.append(folder)
            folder = folder.parent
        folder_made = [str(p) for p in missing]
        os.makedirs(path, exist_ok=True)
        self.made_dirs.extend(folder_made)

    @staticmethod
    def _capture(replica: Replica) -> None:
        """What the container runtime does: each output line stored with its time."""
        assert replica.proc is not None and replica.proc.stdout is not None and replica.log is not None
        with open(replica.log, "a", encoding="utf-8") as out:
            for raw in replica.proc.stdout:
                out.write(f"{now_rfc3339(nanos=True)} {raw.decode('utf-8', 'replace')}")
                if not raw.endswith(b"\n"):
                    out.write("\n")
                out.flush()

    def _kill(self, job: Job) -> None:
        for replica in job.replicas:
            if replica.proc is not None and replica.proc.poll() is None:
                try:
                    os.killpg(replica.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                replica.proc.wait(10)

    def _delete_pods(self, job: Job) -> None:
        for replica in job.replicas:
            try:
                self.core.delete_namespaced_pod(replica.pod, self.namespace, grace_period_seconds=0)
            except ApiException as exc:
                if exc.status != 404:
                    raise

    # -- status, the way each operator writes it --------------------------------------------

    def _initial_status(self, kind: str, job: Job) -> dict[str, Any]:
        t = now_rfc3339()
        if kind in ("TFJob", "PyTorchJob"):
            return {
                "startTime": t,
                "conditions": [
                    {
                        "type": "Created",
                        "status": "True",
                        "reason": f"{kind}Created",
                        "lastUpdateTime": t,
                        "lastTransitionTime": t,
                    },
                    {
                        "type": "Running",
                        "status": "True",
                        "reason": f"{kind}Running",
                        "lastUpdateTime": t,
                        "lastTransitionTime": t,
                    },
                ],
                "replicaStatuses": self._replica_statuses(job),
            }
        if kind == "Framework":
            return {"state": "AttemptRunning", "startTime": t, "attemptStatus": {"id": 0, "startTime": t}}
        if kind == "AdaptDLJob":
            return {"phase": "Running", "replicas": len(job.replicas), "readyReplicas": len(job.replicas)}
        return {
            "jobsStatus": [
                {
                    "name": "node",
                    "active": len(job.replicas),
                    "ready": len(job.replicas),
                    "succeeded": 0,
                    "failed": 0,
                    "suspended": 0,
                }
            ],
            "conditions": [],
        }

    @staticmethod
    def _replica_statuses(job: Job) -> dict[str, Any]:
        out: dict[str, dict[str, int]] = {}
        for r in job.replicas:
            s = out.setdefault(r.role, {"active": 0, "succeeded": 0, "failed": 0})
            key = "active" if r.exit_code is None else ("succeeded" if r.exit_code == 0 else "failed")
            s[key] += 1
        return out

    def _write_status(self, job: Job) -> None:
        group, version, plural = CRD_KINDS[job.kind]
        try:
            self.custom.patch_namespaced_custom_object_status(
                group, version, self.namespace, plural, job.name, {"status": job.status}
            )
        except ApiException as exc:
            if exc.status != 404:
                raise

    def _outcome(self, job: Job, obj: dict[str, Any]) -> bool | None:
        """True succeeded, False failed, None still running (per the operator's rules)."""
        codes = {(r.role, r.index): r.exit_code for r in job.replicas}
        failed = any(c not in (None, 0) for c in codes.values())
        if job.kind in ("TFJob", "PyTorchJob"):
            if failed:
                return False
            chief = [r for r in job.replicas if r.role in ("Chief", "Master")]
            deciders = chief or [r for r in job.replicas if r.role == "Worker"]
            return True if all(r.exit_code == 0 for r in deciders) else None
        if job.kind == "Framework":
            for role in obj["spec"]["taskRoles"]:
                policy = role.get("frameworkAttemptCompletionPolicy", {})
                mine = [r for r in job.replicas if r.role == role["name"]]
                nfail = sum(1 for r in mine if r.exit_code not in (None, 0))
                nok = sum(1 for r in mine if r.exit_code == 0)
                if policy.get("minFailedTaskCount", 1) not in (-1, None) and nfail >= policy.get(
                    "minFailedTaskCount", 1
                ):
                    return False
                if policy.get("minSucceededTaskCount", -1) not in (-1, None) and nok >= policy["minSucceededTaskCount"]:
                    return True
            if all(r.exit_code is not None for r in job.replicas):
                return not failed
            return None
        if failed:
            return False
        return True if all(r.exit_code == 0 for r in job.replicas) else None

    def _reconcile(self, job: Job, obj: dict[str, Any]) -> None:
        if job.done:
            return
        for replica in job.replicas:
            if replica.exit_code is None and replica.proc is not None and replica.proc.poll() is not None:
                if replica.reader is not None:
                    replica.reader.join(5)
                replica.exit_code = replica.proc.returncode
                self._pod_ended(replica)
        stop = job.kind == "Framework" and obj["spec"].get("executionType") == "Stop"
        outcome = False if stop else self._outcome(job, obj)
        if outcome is None:
            if job.kind in ("TFJob", "PyTorchJob"):
                statuses = self._replica_statuses(job)
                if statuses != job.status.get("replicaStatuses"):
                    job.status["replicaStatuses"] = statuses
                    self._write_status(job)
            return
        self._kill(job)  # the rest (PS, other workers) stops with the job, as the operators do
        t = now_rfc3339()
        if job.kind in ("TFJob", "PyTorchJob"):
            for c in job.status["conditions"]:
                if c["type"] == "Running":
                    c.update(status="False", lastTransitionTime=t)
            kind = "Succeeded" if outcome else "Failed"
            job.status["conditions"].append(
                {
                    "type": kind,
                    "status": "True",
                    "reason": f"{job.kind}{kind}",
                    "message": f"{job.kind} {job.name} {kind.lower()}.",
                    "lastUpdateTime": t,
                    "lastTransitionTime": t,
                }
            )
            job.status["replicaStatuses"] = self._replica_statuses(job)
            job.status["completionTime"] = t
        elif job.kind == "Framework":
            if self.delete_fc_pods:  # FrameworkController deletes a completed attempt's pods
                self._delete_pods(job)
            code, phrase = (0, "Succeeded") if outcome else ((-210, "FrameworkStopped") if stop else (1, "Failed"))
            job.status.update(
                state="Completed",
                completionTime=t,
                attemptStatus={
                    **job.status.get("attemptStatus", {}),
                    "completionTime": t,
                    "completionStatus": {
                        "code": code,
                        "phrase": phrase,
                        "diagnostics": "test controller",
                        "type": {"name": "Succeeded" if outcome else "Failed", "attributes": []},
                    },
                },
            )
        elif job.kind == "AdaptDLJob":
            job.status.update(
                phase="Succeeded" if outcome else "Failed",
                completionTimestamp=t,
                **({} if outcome else {"reason": "PodFailure", "message": "a replica failed"}),
            )
        else:
            job.status["jobsStatus"] = [
                {
                    "name": "node",
                    "active": 0,
                    "ready": 0,
                    "suspended": 0,
                    "succeeded": sum(1 for r in job.replicas if r.exit_code == 0),
                    "failed": sum(1 for r in job.replicas if r.exit_code not in (None, 0)),
                }
            ]
            kind = "Complete" if outcome else "Failed"
            job.status["conditions"] = [
                {
                    "type": kind,
                    "status": "True",
                    "reason": "JobsSucceeded" if outcome else "JobsFailed",
                    "message": f"trainjob {kind.lower()}",
                    "lastTransitionTime": t,
                }
            ]
        job.done = True
        self._write_status(job)
        self.completed_at[job.name] = time.time()

    # -- for tests ---------------------------------------------------------------------------

    def job(self, name: str) -> Job | None:
        with self._lock:
            return next((j for j in self.jobs.values() if j.name == name), None)

    def launches(self, name: str) -> int:
        with self._lock:
            return sum(1 for j in self.jobs.values() if j.name == name)

    def running_processes(self) -> int:
        with self._lock:
            return sum(1 for j in self.jobs.values() for r in j.replicas if r.proc and r.proc.poll() is None)

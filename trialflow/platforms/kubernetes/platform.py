"""The machinery every Kubernetes platform shares; each kind is a small module beside it.

A kind module (kubeflow, kubeflow_trainer, frameworkcontroller, adaptdl) gives
pure builders and tables: the manifest for one trial, its status map, which
pod's log carries the metrics, and how it is stopped. This module does the
rest the same way for all of them:

* submit: the trial's ConfigMap (or its files on mounted storage), then the
  job; a name that exists already is re-attached, never started twice;
* poll: status from the kind's table, read from a per-process watch cache
  (``statusUpdates: watch``) or one GET (``poll``); metrics from the metrics
  pod's log (incrementally, by timestamp) or its file on mounted storage (by
  byte offset);
* cancel: the reason is written on the object first (so a follower that next
  sees it deleted knows why), then it is deleted with propagationPolicy
  Background, or stopped where the kind has a stop (Framework executionType);
* cleanup: everything labelled with the experiment id.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from trialflow.config.platforms import KubernetesServiceConfig, KubernetesStorageConfig
from trialflow.platforms.base import (
    Connections,
    Cursor,
    Resume,
    TrainingPlatform,
    TrialHandle,
    TrialSpec,
    TrialStatus,
    TrialUpdate,
)
from trialflow.platforms.kubernetes import storage as kube_storage
from trialflow.platforms.kubernetes.client import Cluster, CustomObjects, KubernetesError, Resource
from trialflow.platforms.kubernetes.faults import job_fault
from trialflow.platforms.kubernetes.informer import INFORMERS
from trialflow.platforms.kubernetes.logs import new_log_lines, since_time
from trialflow.platforms.kubernetes.manifests import (
    CANCEL_ANNOTATION,
    LABEL_EXPERIMENT,
    LABEL_MANAGED,
    LABEL_TRIAL,
    PodParts,
    cancel_record_name,
    config_map_name,
    experiment_selector,
    job_name,
    trial_labels,
)
from trialflow.platforms.mounted import read_log_metrics, resume_in_folder
from trialflow.trial.packing import CodeDirectoryError, check_limits, collect_files, pack
from trialflow.trial.protocol import read_stdout_lines

log = logging.getLogger(__name__)

#: How often a running trial's log is read for metrics (status comes from the watch).
LOG_INTERVAL_SECONDS = 5.0
#: Bytes of a pod's log file read per poll from mounted storage.
#: How long a poll waits for the watch's first list before reading its job directly.
SYNC_WAIT_SECONDS = 10.0


class KubernetesPlatform(TrainingPlatform[KubernetesServiceConfig]):
    """Base of the Kubernetes platforms. Subclasses set the class attributes and builders."""

    name: ClassVar[str]
    resource: ClassVar[Resource]
    #: NNI_PLATFORM for the trial (nni then writes metrics to stdout).
    nni_platform: ClassVar[str]
    #: Stopping: True deletes the object; False patches ``stop_patch`` (FrameworkController).
    cancel_by_delete: ClassVar[bool] = True
    #: Through mounted storage (checkpoints_refused): the trial's folder is on a share the
    #: Airflow workers mount, so checkpoints are read there; a restart is a new job per attempt.
    keeps_checkpoints: ClassVar[bool] = True
    stop_patch: ClassVar[dict[str, Any]] = {}
    #: Why this kind cannot run without mounted storage (None: the ConfigMap way works).
    storage_required: ClassVar[str | None] = None

    def __init__(self, config: KubernetesServiceConfig, experiment_dir: Path, connections: Connections | None = None):
        super().__init__(config, experiment_dir, connections)
        self.cluster = Cluster(
            config.kubernetes_conn_id,
            str(config.kubeconfig) if config.kubeconfig else None,
            self.connections.kubernetes,
        )
        self.api = CustomObjects(self.cluster, config.namespace)
        self._cancelled: dict[str, tuple[TrialStatus, str]] = {}

    @classmethod
    def checkpoints_refused(cls, config: Any) -> str | None:
        storage = getattr(config, "storage", None)
        if storage is not None and storage.local_mount_point is not None:
            return None
        return (
            f"{cls.name} keeps checkpoints through mounted storage: set trainingService.storage (nfs, "
            "azureStorage or pvc) with localMountPoint, the folder where the Airflow workers mount it "
            "(a pod's own disk is gone when it ends)"
        )

    # -- what a kind module provides ---------------------------------------------------------

    @property
    def storage(self) -> KubernetesStorageConfig | None:
        """Storage that carries the trial's files: one the Airflow side reaches (localMountPoint)."""
        storage = self.config.storage
        return storage if storage is not None and storage.local_mount_point is not None else None

    @property
    def data_storage(self) -> KubernetesStorageConfig | None:
        """Storage without a localMountPoint (NNI's seed configs give only server and path):
        mounted into the pods for the trial's data, while code, parameters and metrics travel
        the ConfigMap way. trialflow never runs ``sudo mount``, so NNI's users need not either."""
        storage = self.config.storage
        return storage if storage is not None and storage.local_mount_point is None else None

    def build_job(self, spec: TrialSpec, name: str, pod: PodParts) -> dict[str, Any]:
        raise NotImplementedError

    def status_of(self, obj: Mapping[str, Any]) -> tuple[TrialStatus, str | None]:
        raise NotImplementedError

    def metrics_pod_selector(self, name: str) -> str:
        """Label selector of the pod whose output carries the metrics (rank 0 of the first role)."""
        raise NotImplementedError

    metrics_container: ClassVar[str | None] = None

    # -- shared builders ---------------------------------------------------------------------

    def code_in_image(self, code_dir: Path) -> bool:
        """Whether the trial's code is already in the image (then nothing is shipped)."""
        return False

    def _image_code_dir(self, spec: TrialSpec) -> str | None:
        return Path(spec.code_dir).as_posix() if self.code_in_image(spec.code_dir) else None

    def pod_parts(self, spec: TrialSpec, name: str) -> PodParts:
        paths = kube_storage.trial_paths(self.storage, spec.experiment_id, spec.trial_id, self._image_code_dir(spec))
        env = spec.environment(self.nni_platform, paths.sys_dir, paths.code_dir, base={}, marked=False)
        return PodParts(
            labels=trial_labels(spec),
            env=[{"name": k, "value": v} for k, v in sorted(env.items())],
            volumes=kube_storage.volumes(self.storage, config_map_name(name), self.data_storage),
            volume_mounts=kube_storage.volume_mounts(self.storage, self.data_storage),
            script=lambda command: kube_storage.start_script(self.storage, paths, command),
            service_account=self.config.service_account_name,
        )

    def config_map(self, spec: TrialSpec, name: str) -> dict[str, Any] | None:
        if self.storage is not None:
            return None
        code = None if self.code_in_image(spec.code_dir) else pack(spec.code_dir, spec.code_excludes)
        return kube_storage.config_map(config_map_name(name), trial_labels(spec), code, spec.parameter_cfg())

    def extra_objects(self, spec: TrialSpec) -> list[dict[str, Any]]:
        """Core objects the job needs besides its ConfigMap (image pull secrets, claims)."""
        return []

    def objects(self, spec: TrialSpec, attempt: int = 0) -> list[dict[str, Any]]:
        """Every object one trial creates, in creation order, exactly as sent (``attempt``: a
        restart after a fault is a job of its own, named for it)."""
        name = job_name(spec.trial_id, attempt)
        out = list(self.extra_objects(spec))
        cm = self.config_map(spec, name)
        if cm is not None:
            out.append(cm)
        job = self.build_job(spec, name, self.pod_parts(spec, name))
        job.setdefault("metadata", {})
        job["metadata"]["namespace"] = self.config.namespace
        for obj in out:
            obj["metadata"]["namespace"] = self.config.namespace
        out.append(job)
        return out

    # -- platform contract ------------------------------------------------------------------

    def preflight(self, code_dir: Path, excludes: tuple[Path, ...] = ()) -> list[tuple[tuple[str | int, ...], str]]:
        """Said before an experiment starts, without the cluster: the code must exist and fit
        where it travels, mounted storage must be reachable from here, and what the job's objects
        read (registry secrets, templates) must be readable."""
        storage = self.storage
        if storage is None and self.storage_required:
            why = self.storage_required
            if self.data_storage is not None:
                why += f" ({kube_storage.mount_hint(self.data_storage)})"
            return [(("storage",), why)]
        in_image = self.code_in_image(code_dir)
        if not in_image and not Path(code_dir).is_dir():
            return [
                (
                    ("trialCodeDirectory",),
                    f"the trial code directory {code_dir} does not exist (it is shipped to the pods)",
                )
            ]
        try:
            total = 0 if in_image else check_limits(code_dir, collect_files(code_dir, excludes))
            if storage is None and total > kube_storage.CONFIG_MAP_LIMIT // 2:
                kube_storage.config_map("check", {}, pack(code_dir, excludes), "")
            if storage is not None:
                kube_storage.check_storage(storage)
            self.extra_objects(TrialSpec("check", "check-0000", 0, 0, {}, "", Path(code_dir)))
        except CodeDirectoryError as exc:
            return [(("trialCodeDirectory",), str(exc))]
        except kube_storage.StorageError as exc:
            return [(("storage",) if storage is not None else ("trialCodeDirectory",), str(exc))]
        except KubernetesError as exc:
            return [((), str(exc))]
        return []

    async def prepare(self, experiment_id: str) -> None:
        """Fail before any trial when the cluster, the CRD or the storage cannot work."""
        if self.storage is not None:
            kube_storage.check_storage(self.storage)
        if self.data_storage is not None:
            log.info(
                "storage %s has no localMountPoint: the pods mount it at %s for data; code, parameters and "
                "metrics travel in a ConfigMap and the pods' logs",
                self.data_storage.storage_type,
                self.data_storage.container_mount_point,
            )
        plurals = await self.api.served_plurals(self.resource)
        if plurals is None:
            raise KubernetesError(
                f"{self.cluster.label} does not serve {self.resource.api_version}: the {self.resource.kind} "
                f"CRD ({self.resource.crd_name}) is not installed; install its operator first"
            )
        if self.resource.plural not in plurals:
            raise KubernetesError(
                f"{self.cluster.label} serves {self.resource.api_version} but not "
                f"{self.resource.plural}: is the {self.resource.kind} CRD installed?"
            )

    async def submit(self, spec: TrialSpec) -> TrialHandle:
        return await self._submit(spec, 0, spec.start_from)

    async def _submit(self, spec: TrialSpec, attempt: int, resume: Resume | None) -> TrialHandle:
        name = job_name(spec.trial_id, attempt)
        existing = await self.api.get(self.resource, name, served=False)  # the create explains a 404
        if existing is not None:  # a retried task or restart: re-attach, never start it twice
            return self._handle(spec, name, existing)
        paths = kube_storage.trial_paths(self.storage, spec.experiment_id, spec.trial_id, self._image_code_dir(spec))
        if self.storage is not None:
            kube_storage.stage_code(
                self.storage,
                spec.experiment_id,
                None if self.code_in_image(spec.code_dir) else spec.code_dir,
                spec.code_excludes,
            )
            if resume is not None:  # fetched onto the share, named by the pods' own path
                local = kube_storage.local_trial_dir(self.storage, spec.experiment_id, spec.trial_id)
                spec = await asyncio.to_thread(resume_in_folder, spec, local, paths.sys_dir, attempt, resume)
            text = spec.parameter_cfg(paths.sys_dir)
            kube_storage.write_parameters(self.storage, spec.experiment_id, spec.trial_id, text)
        objects = self.objects(spec, attempt)  # built whole before anything is created (too big: no half-made trial)
        for obj in objects[:-1]:
            await self.api.create_core(obj)
        created, _ = await self.api.create(self.resource, objects[-1])
        handle = self._handle(spec, name, created)
        return {**handle, "attempt": attempt} if attempt else handle

    async def fetch_output(
        self, handle: TrialHandle, relative: str, scratch: Path, max_bytes: int | None = None
    ) -> Path:
        """The trial's folder on the share, as the Airflow workers mount it: read in place
        (without following a symlink, trialflow.trial.folder)."""
        assert self.storage is not None  # checkpoints_refused: no checkpoints without it
        return kube_storage.local_trial_dir(self.storage, handle["experiment_id"], handle["trial_id"])

    def ended_by_fault(self, update: TrialUpdate) -> bool:
        return update.fault is not None

    async def restart(self, handle: TrialHandle, spec: TrialSpec, attempt: int, resume: Resume | None) -> TrialHandle:
        """A new job for the attempt (``<name>-a<n>``), its checkpoint fetched onto the share
        first; the failed job stays as the operator left it (its pods' logs readable) until
        cleanup. A second call for the attempt re-attaches to its job."""
        started = await self._submit(spec, attempt, resume)
        return {**started, "attempt": attempt}

    def _handle(self, spec: TrialSpec, name: str, obj: Mapping[str, Any]) -> TrialHandle:
        return {
            "platform": self.name,
            "trial_id": spec.trial_id,
            "experiment_id": spec.experiment_id,
            "name": name,
            "namespace": self.config.namespace,
            "kind": self.resource.kind,
            "uid": (obj.get("metadata") or {}).get("uid"),
            "host": self.cluster.label,
            "submitted_at": time.time(),
        }

    async def _object(self, handle: TrialHandle) -> tuple[dict[str, Any] | None, bool]:
        """(the job or its last state, deleted?) from the watch cache, else one GET."""
        name = handle["name"]
        if self.config.status_updates == "watch":
            informer = INFORMERS.get(self.api, self.resource, experiment_selector(handle["experiment_id"]))
            try:
                await informer.wait_synced(SYNC_WAIT_SECONDS)
            except TimeoutError:  # the watch cannot list (yet): ask directly meanwhile
                log.warning(
                    "watch of %s not ready (%s); reading %s directly", self.resource.plural, informer.error, name
                )
            obj, deleted = informer.get(name)
            if obj is not None:
                if obj.get("metadata", {}).get("uid") == handle.get("uid") or handle.get("uid") is None:
                    return obj, deleted
        obj = await self.api.get(self.resource, name)
        if obj is not None and handle.get("uid") and obj["metadata"].get("uid") != handle["uid"]:
            return None, True  # a different object under the same name: ours is gone
        return obj, obj is None

    def _cancel_reason(self, handle: TrialHandle, obj: Mapping[str, Any] | None) -> tuple[TrialStatus, str] | None:
        if handle["trial_id"] in self._cancelled:
            return self._cancelled[handle["trial_id"]]
        raw = ((obj or {}).get("metadata") or {}).get("annotations", {}).get(CANCEL_ANNOTATION)
        if raw:
            data = json.loads(raw)
            return TrialStatus(data["status"]), data["reason"]
        return None

    async def poll(self, handle: TrialHandle, cursor: Cursor) -> TrialUpdate:
        obj, deleted = await self._object(handle)
        cancel = self._cancel_reason(handle, obj)
        cursor = dict(cursor)
        message: str | None
        if deleted or obj is None:
            if cancel is None:  # cancelled by another process before this one saw it: the tombstone
                data = await self.api.read_config_map(cancel_record_name(handle["name"]))
                if data and "status" in data:
                    cancel = TrialStatus(data["status"]), data.get("reason", "")
            if cancel is not None:
                status, message = cancel
            else:
                status, message = (
                    TrialStatus.USER_CANCELED,
                    (f"{self.resource.kind} {handle['name']} was deleted outside trialflow"),
                )
            return TrialUpdate(status, [], cursor, message)
        cursor["version"] = obj["metadata"].get("resourceVersion")
        status, message = self.status_of(obj)
        fault = None
        if cancel is not None and status.is_terminal and status != TrialStatus.SUCCEEDED:
            status, message = cancel  # operators report a stop as a failure; it was our cancel
        elif status == TrialStatus.FAILED:
            fault = await self._fault(handle)
            message = "; ".join(m for m in (message, fault) if m) or None
        metrics, cursor, skipped = await self._metrics(handle, cursor, status)
        return TrialUpdate(status, metrics, cursor, message, skipped=skipped, fault=fault)

    async def _fault(self, handle: TrialHandle) -> str | None:
        """What the failed job's own pods say ended them (trialflow.platforms.kubernetes.faults):
        the trial's pods, of this job (its owner), not an earlier attempt's."""
        pods = await self.api.pods(f"{LABEL_TRIAL}={handle['trial_id']}")
        owned = [
            p
            for p in pods
            if any(o.get("name") == handle["name"] for o in (p.get("metadata") or {}).get("ownerReferences") or [])
        ]
        return job_fault(owned)

    async def wait_for_change(self, handle: TrialHandle, cursor: Cursor, timeout: float) -> None:
        """The follow loop's pause: with the watch, it ends as soon as the job changes (so an
        ended trial is seen at once, not a poll interval later); otherwise a plain sleep."""
        if self.config.status_updates != "watch":
            await asyncio.sleep(timeout)
            return
        informer = INFORMERS.get(self.api, self.resource, experiment_selector(handle["experiment_id"]))
        await informer.changed(handle["name"], cursor.get("version"), timeout)

    async def _metrics(
        self, handle: TrialHandle, cursor: Cursor, status: TrialStatus
    ) -> tuple[list, Cursor, list[str]]:
        if status == TrialStatus.WAITING:
            return [], cursor, []
        now = time.time()  # wall clock: the cursor moves from a worker to the triggerer
        if (
            not status.is_terminal
            and now - float(cursor.get("log_read_at", 0)) < LOG_INTERVAL_SECONDS
            and cursor.get("log_read_at") is not None
        ):
            return [], cursor, []
        pod = cursor.get("pod")
        if pod is None:
            pods = await self.api.pods(self.metrics_pod_selector(handle["name"]))
            if not pods:
                return [], cursor, []
            pod = sorted(p["metadata"]["name"] for p in pods)[0]
            cursor["pod"] = pod
        cursor["log_read_at"] = now
        if self.storage is not None:
            path = kube_storage.local_log_file(self.storage, handle["experiment_id"], handle["trial_id"], pod)
            metrics, skipped = read_log_metrics(path.parent, path.name, cursor, final=status.is_terminal)
            return metrics, cursor, skipped
        text = await self.api.pod_log(pod, self.log_container(), since_time(cursor.get("log_ts")))
        lines, cursor["log_ts"], cursor["log_n"] = new_log_lines(
            text, cursor.get("log_ts"), int(cursor.get("log_n", 0))
        )
        read = read_stdout_lines("".join(line + "\n" for line in lines).encode())
        return read.metrics, cursor, read.skipped

    def log_container(self) -> str:
        return self.metrics_container or "trial"

    async def stop(self, handle: TrialHandle, status: TrialStatus, reason: str) -> None:
        # Why it stopped must outlive the job: a small ConfigMap (removed by cleanup) for a
        # follower that only learns of it after the deletion, and an annotation for one that
        # sees the DELETED event.
        self._cancelled[handle["trial_id"]] = (status, reason)
        await self.api.create_core(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": cancel_record_name(handle["name"]),
                    "labels": {
                        LABEL_MANAGED: "trialflow",
                        LABEL_EXPERIMENT: handle["experiment_id"],
                        LABEL_TRIAL: handle["trial_id"],
                    },
                },
                "data": {"status": status.value, "reason": reason},
            }
        )
        note = {
            "metadata": {"annotations": {CANCEL_ANNOTATION: json.dumps({"status": status.value, "reason": reason})}}
        }
        if self.cancel_by_delete:
            if await self.api.merge_patch(self.resource, handle["name"], note):
                await self.api.delete(self.resource, handle["name"])
        else:
            await self.api.merge_patch(self.resource, handle["name"], {**note, **self.stop_patch})

    async def cleanup(self, experiment_id: str) -> None:
        """Delete the experiment's jobs, ConfigMaps and secrets (and its files on storage)."""
        selector = experiment_selector(experiment_id)
        await self.api.delete_collection(self.resource, selector)
        for kind in self.api.CORE_KINDS:
            await self.api.delete_core(kind, selector)
        if self.storage is not None and self.storage.local_mount_point is not None:
            kube_storage.remove_experiment(self.storage, experiment_id)

    def render(self, spec: TrialSpec) -> Mapping[str, Any]:
        objects = self.objects(spec)
        for obj in objects:
            if obj["kind"] == "Secret":
                obj["data"] = {k: "***" for k in obj.get("data", {})}
        return {"platform": self.name, "objects": objects}

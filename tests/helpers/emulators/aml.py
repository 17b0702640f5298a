"""An Azure Machine Learning workspace (ARM, api-version 2023-04-01 as azure-ai-ml sends it) whose
command jobs really run, over HTTPS, with Azurite as the workspace's blob storage.

What azure-ai-ml's ``jobs.create_or_update(command(...))`` asks, in order (recorded in
``requests``; tests/platforms/test_aml.py pins the sequence so an SDK change shows): the code
asset by content hash, the default datastore and its secrets (a SAS for Azurite), the blob
upload (to Azurite), the code version, the anonymous environment version, the job. Then
``jobs.get`` reads the job and ``jobs.begin_cancel`` POSTs ``cancel`` and polls the operation.

A job's code is fetched from Azurite, its command runs as a local process in its own mount
namespace (tests/helpers/emulators/base.py), and its output is appended to the blob
``ExperimentRun/dcid.<job>/user_logs/std_log.txt`` of the artifact container while it runs, as
Azure ML uploads a job's logs.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
import threading
import uuid
from datetime import UTC
from pathlib import Path
from typing import Any

from tests.helpers.emulators.base import Emulator, Job, Request, can_run_jobs

__all__ = ["AmlEmulator", "can_run_jobs"]

PROVIDER = "/providers/Microsoft.MachineLearningServices/workspaces/"
#: Azure ML job statuses, from the emulator's job states.
STATES = {
    "waiting": "Queued",
    "running": "Running",
    "succeeded": "Completed",
    "failed": "Failed",
    "stopping": "CancelRequested",
    "stopped": "Canceled",
}
ARTIFACTS = "azureml"  # the artifact container, as in a real workspace
ACCOUNT = "devstoreaccount1"
STORAGE_PROVIDER = "/subscriptions/x/resourceGroups/x/providers/Microsoft.Storage/storageAccounts"
LOG_BLOB = "ExperimentRun/dcid.{name}/user_logs/std_log.txt"


class AmlEmulator(Emulator):
    def __init__(
        self,
        token: str,
        subscription: str,
        resource_group: str,
        workspace: str,
        computes: tuple[str, ...],
        blob: Any,
        account_key: str,
        tls: tuple[str, str],
        storage_suffix: str,
        images: dict[str, str] | None = None,
    ):
        """``blob``: the emulator's own client of the Azurite account (azure-storage-blob's
        BlobServiceClient, path-style); ``account_key``: what listSecrets hands out."""
        super().__init__({}, images, tls)
        self.token = token
        self.computes = computes
        self.blob = blob
        self.account_key = account_key
        self.resources: dict[str, dict[str, Any]] = {}
        self.storage_suffix = storage_suffix
        self.root = f"/subscriptions/{subscription}/resourceGroups/{resource_group}{PROVIDER}{workspace}"
        self.work = Path(tempfile.mkdtemp(prefix="aml-emulator-"))
        #: Jobs whose log's last upload is done: until then an ended job is "Finalizing".
        self.logs_final: set[str] = set()
        #: A cloud name of its own: the SDK caches clouds by name for the process's life.
        self.cloud = f"TrialflowTest{self.server.server_address[1]}"
        for name, container in (("workspaceblobstore", "code"), ("workspaceartifactstore", ARTIFACTS)):
            self._store(f"/datastores/{name}", _datastore(container, name == "workspaceblobstore", storage_suffix))
            if not blob.get_container_client(container).exists():
                blob.create_container(container)
        for compute in computes:
            self._store(
                f"/computes/{compute}",
                {
                    "location": "local",
                    "properties": {
                        "computeType": "AmlCompute",
                        "provisioningState": "Succeeded",
                        "properties": {
                            "vmSize": "STANDARD_DS3_V2",
                            "scaleSettings": {"minNodeCount": 0, "maxNodeCount": 4},
                        },
                    },
                },
            )

    def __exit__(self, *exc: Any) -> None:
        super().__exit__(*exc)
        shutil.rmtree(self.work, ignore_errors=True)

    # -- ARM -----------------------------------------------------------------------------------

    def route(self, r: Request) -> tuple[int, Any]:
        if r.path == "/metadata/endpoints":  # ARM's cloud metadata: public, as on Azure
            return 200, [self._cloud_metadata()]
        if r.headers.get("authorization") != f"Bearer {self.token}":
            return 401, {"error": {"code": "InvalidAuthenticationToken", "message": "The access token is invalid."}}
        path = r.path.rstrip("/")
        if not path.lower().startswith(self.root.lower()):
            return 404, _error("ResourceNotFound", f"The resource {path} was not found.")
        rest = path[len(self.root) :]
        if r.method == "GET" and rest == "":
            return 200, {"id": self.root, "name": self.root.rsplit("/", 1)[1], "location": "local", "properties": {}}
        if r.method == "GET" and rest == "/datastores":
            default = r.query.get("isDefault") == "true"
            items = [d for k, d in self.resources.items() if k.startswith("/datastores/") and k.count("/") == 2]
            return 200, {"value": [d for d in items if d["properties"].get("isDefault") or not default]}
        if r.method == "POST" and re.fullmatch(r"/datastores/[^/]+/listSecrets", rest):
            return 200, {"secretsType": "AccountKey", "key": self.account_key}
        if r.method == "POST" and re.fullmatch(r"/codes/[^/]+/versions/[^/]+/startPendingUpload", rest):
            return 200, self._pending_upload(json.loads(r.body or b"{}"))
        if r.method == "GET" and re.fullmatch(r"/codes/[^/]+/versions", rest):
            return 200, {"value": [v for k, v in self.resources.items() if k.startswith(rest + "/")]}
        if r.method == "PUT" and re.fullmatch(r"/jobs/[^/]+", rest):
            return self._submit(rest, json.loads(r.body))
        if r.method == "POST" and (m := re.fullmatch(r"/jobs/([^/]+)/cancel", rest)):
            job = self.jobs.get(m.group(1))
            if job is None:
                return 404, _error("UserError", f"Job {m.group(1)} not found")
            self.stop_job(job)
            return 202, None
        if r.method == "PUT":
            return 200, self._store(rest, json.loads(r.body))
        if r.method == "GET" and rest in self.resources:
            return 200, self._view(rest)
        return 404, _error("UserError", f"{rest.lstrip('/')} was not found in the workspace")

    def _pending_upload(self, body: dict[str, Any]) -> dict[str, Any]:
        """A temporary container and a SAS to write it, as Azure ML hands out for a code upload."""
        from datetime import datetime, timedelta

        from azure.storage.blob import ContainerSasPermissions, generate_container_sas

        container = f"upload-{uuid.uuid4().hex[:16]}"
        self.blob.create_container(container)
        sas = generate_container_sas(
            ACCOUNT,
            container,
            account_key=self.account_key,
            permission=ContainerSasPermissions(read=True, write=True, create=True, add=True, list=True),
            expiry=datetime.now(UTC) + timedelta(hours=1),
        )
        uri = f"https://{ACCOUNT}.blob.{self.storage_suffix}/{container}"
        return {
            "blobReferenceForConsumption": {
                "blobUri": uri,
                "storageAccountArmId": f"{STORAGE_PROVIDER}/{ACCOUNT}",
                "credential": {"credentialType": "SAS", "sasUri": f"{uri}?{sas}"},
            },
            "pendingUploadId": body.get("pendingUploadId") or uuid.uuid4().hex,
            "pendingUploadType": "TemporaryBlobReference",
        }

    def _cloud_metadata(self) -> dict[str, Any]:
        return {
            "name": self.cloud,
            "portal": "https://portal.trialflow.test/",
            "resourceManager": self.host + "/",
            "authentication": {"loginEndpoint": self.host + "/login/", "audiences": [self.host + "/"]},
            "suffixes": {"storage": self.storage_suffix},
        }

    def _store(self, rest: str, body: dict[str, Any]) -> dict[str, Any]:
        kind = "/".join(part for i, part in enumerate(rest.strip("/").split("/")) if i % 2 == 0)
        stored = {
            **body,
            "id": self.root + rest,
            "name": rest.rsplit("/", 1)[1],
            "type": f"Microsoft.MachineLearningServices/workspaces/{kind}",
            "systemData": {"createdAt": "2026-11-23T00:00:00Z", "createdBy": "trialflow-test"},
        }
        self.resources[rest] = stored
        return stored

    def _view(self, rest: str) -> dict[str, Any]:
        view = json.loads(json.dumps(self.resources[rest]))
        job = self.jobs.get(rest.rsplit("/", 1)[1]) if rest.startswith("/jobs/") else None
        if job is not None:
            status = STATES[job.state]
            if status in ("Completed", "Failed", "Canceled") and job.name not in self.logs_final:
                # Azure ML's own step between the code's end and the job's: its logs and outputs
                # are still being uploaded (the job said Completed before its log's last lines
                # were there, and a trial was read as succeeded with no final result)
                status = "Finalizing"
            view["properties"]["status"] = status
        return view

    # -- jobs ----------------------------------------------------------------------------------

    def _submit(self, rest: str, body: dict[str, Any]) -> tuple[int, Any]:
        name = rest.rsplit("/", 1)[1]
        props = body.get("properties") or {}
        compute = str(props.get("computeId") or "").rsplit("/", 1)[-1]
        if compute not in self.computes:
            return 400, _error("UserError", f"Compute {compute} not found in workspace")
        with self.lock:
            if name in self.jobs:  # an existing job: only its tags, description and name change
                mutable = {k: v for k, v in props.items() if k in ("tags", "description", "displayName")}
                self.resources[rest]["properties"].update(mutable)
                return 200, self._view(rest)
            stored = self._store(rest, body)
            job = self.jobs[name] = Job(name, name, stored)
        code = self._fetch_code(str(props.get("codeId") or ""), name)
        environment = self.resources.get(_relative(str(props.get("environmentId") or ""), self.root), {})
        image = (environment.get("properties") or {}).get("image")
        log = self.work / name / "std_log.txt"
        script = f"cd {_q(str(code))} && exec sh -c {_q(props['command'])} > {_q(str(log))} 2>&1"
        self.run_job(job, script, [], image, dict(props.get("environmentVariables") or {}))
        threading.Thread(target=self._upload_log, args=(job, log), daemon=True).start()
        return 201, self._view(rest)

    def _fetch_code(self, code_id: str, name: str) -> Path:
        """The code asset's files, from the blob storage the SDK uploaded them to."""
        version = self.resources[_relative(code_id, self.root)]
        uri = version["properties"]["codeUri"]  # https://<account>.blob.<suffix>/<container>/<prefix>
        container, _, prefix = uri.split("?")[0].split("/", 3)[3].partition("/")
        prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        target = self.work / name / "code"
        target.mkdir(parents=True)
        client = self.blob.get_container_client(container)
        for item in client.list_blobs(name_starts_with=prefix or None):
            dest = target / item.name[len(prefix) :]
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(client.download_blob(item.name).readall())
        return target

    def _upload_log(self, job: Job, log: Path) -> None:
        """Azure ML uploads a job's user logs while it runs; here every 0.3 s and once at the end."""
        blob = self.blob.get_blob_client(ARTIFACTS, LOG_BLOB.format(name=job.name))
        sent = -1
        while True:
            finished = job.done.wait(0.3)
            data = log.read_bytes() if log.exists() else b""
            if len(data) != sent:
                blob.upload_blob(data, overwrite=True)
                sent = len(data)
            if finished:
                self.logs_final.add(job.name)
                return


def _datastore(container: str, default: bool, storage_suffix: str) -> dict[str, Any]:
    return {
        "properties": {
            "datastoreType": "AzureBlob",
            "accountName": ACCOUNT,
            "containerName": container,
            "endpoint": storage_suffix,
            "protocol": "https",
            "credentials": {"credentialsType": "AccountKey"},
            "isDefault": default,
            "serviceDataAccessAuthIdentity": "None",
        }
    }


def _relative(resource_id: str, root: str) -> str:
    return resource_id[len(root) :] if resource_id.lower().startswith(root.lower()) else resource_id


def _error(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}


def _q(text: str) -> str:
    import shlex

    return shlex.quote(text)

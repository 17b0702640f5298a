"""How a trial's code, parameters and metrics travel between Airflow and its pods.

Pure builders (volumes, mounts, the container's start script, the ConfigMap)
plus the Airflow-side file work for mounted storage. Two ways:

* **ConfigMap** (no storage configured, trialflow's default): the packed code,
  trialflow's light SDK, NNI's parameter.cfg and the stdlib extractor travel in
  one ConfigMap per trial; the pod unpacks them into an emptyDir; metrics are
  the ``NNISDK_MEb`` lines of the metrics pod's log, read through the API.
  Nothing to mount anywhere, no inbound port.
* **Mounted storage** (NNI's NFS or Azure Files, or a PersistentVolumeClaim):
  the pods mount it at ``containerMountPoint`` (NNI: /tmp/mount); the Airflow
  workers see the same files at ``localMountPoint``, which the user mounted
  (trialflow never runs sudo mount). Code is copied there once per experiment,
  parameter.cfg once per trial, and each pod tees its output into
  ``trials/<trial>/logs/<pod>.log``, which Airflow reads by byte offset.
"""

from __future__ import annotations

import base64
import os
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trialflow.config.platforms import KubernetesStorageConfig
from trialflow.platforms.mounted import stage_tree, write_parameter_file
from trialflow.trial import unpack
from trialflow.trial.packing import PackedCode, pack_sdk, sdk_pythonpath

FILES_DIR = "/tmp/trialflow/files"  # the ConfigMap, read-only
WORK_DIR = "/tmp/trialflow/work"  # an emptyDir: the trial's own copy of the code
FILES_VOLUME = "trialflow-files"
WORK_VOLUME = "trialflow-work"
STORAGE_VOLUME = "nni-vol"  # NNI's volume name
#: The API server refuses a ConfigMap over 1 MiB (data + binaryData, raw bytes); the rest of
#: the object needs a little room.
CONFIG_MAP_LIMIT = 1024 * 1024 - 8 * 1024


class StorageError(ValueError):
    """Storage that cannot work as configured; the message says what to change."""


@dataclass(frozen=True)
class TrialPaths:
    """Where a trial's files are inside its pods."""

    sys_dir: str  # NNI_SYS_DIR: parameter.cfg, nni's own files
    code_dir: str  # the trial's working directory (its own copy of the code)
    sdk_dir: str  # on PYTHONPATH
    log_dir: str | None  # mounted storage: where each pod tees its output
    code_in_image: bool = False  # code_dir is a folder of the image (NNI's AdaptDL way): nothing shipped


def storage_root(storage: KubernetesStorageConfig) -> str:
    return f"{storage.container_mount_point.rstrip('/')}/trialflow"


def trial_paths(
    storage: KubernetesStorageConfig | None, experiment_id: str, trial_id: str, image_code_dir: str | None = None
) -> TrialPaths:
    """``image_code_dir``: the code is already in the image there; it is not shipped."""
    code_dir = image_code_dir or f"{WORK_DIR}/code"
    if storage is None:
        return TrialPaths(f"{WORK_DIR}/sys", code_dir, f"{WORK_DIR}/sdk", None, image_code_dir is not None)
    root = f"{storage_root(storage)}/{experiment_id}"
    sys_dir = f"{root}/trials/{trial_id}"
    return TrialPaths(sys_dir, code_dir, f"{root}/sdk", f"{sys_dir}/logs", image_code_dir is not None)


def volumes(
    storage: KubernetesStorageConfig | None, config_map: str, data: KubernetesStorageConfig | None = None
) -> list[dict[str, Any]]:
    """The pod volumes for a trial (the same for every role); ``data`` is storage mounted for
    the trial's data only, beside the ConfigMap way."""
    vols: list[dict[str, Any]] = [{"name": WORK_VOLUME, "emptyDir": {}}]
    if storage is None:
        vols.append({"name": FILES_VOLUME, "configMap": {"name": config_map}})
    for shared in (storage, data):
        volume = _storage_volume(shared) if shared is not None else None
        if volume is not None:
            vols.append({"name": STORAGE_VOLUME, **volume})
    return vols


def _storage_volume(storage: KubernetesStorageConfig) -> dict[str, Any] | None:
    if storage.storage_type == "nfs":
        return {"nfs": {"server": storage.server, "path": storage.path}}
    if storage.storage_type == "azureStorage":
        return {"azureFile": {"secretName": storage.secret_name, "shareName": storage.azure_share, "readOnly": False}}
    if storage.claim_name:
        return {"persistentVolumeClaim": {"claimName": storage.claim_name}}
    return None  # a pvc without claimName: a template mounts the claim


def volume_mounts(
    storage: KubernetesStorageConfig | None, data: KubernetesStorageConfig | None = None
) -> list[dict[str, Any]]:
    mounts: list[dict[str, Any]] = [{"name": WORK_VOLUME, "mountPath": WORK_DIR}]
    if storage is None:
        mounts.append({"name": FILES_VOLUME, "mountPath": FILES_DIR, "readOnly": True})
    for shared in (storage, data):
        if shared is not None and _storage_volume(shared) is not None:
            mounts.append({"name": STORAGE_VOLUME, "mountPath": shared.container_mount_point})
    return mounts


def start_script(storage: KubernetesStorageConfig | None, paths: TrialPaths, command: str) -> str:
    """The container's shell script: put the code in place, then run the trial command.

    POSIX sh only (images differ). With a ConfigMap the trial command's output is the pod
    log; with mounted storage it is also teed into the pod's own log file there, keeping
    the command's exit code (sh has no pipefail).
    """
    q = shlex.quote
    py = 'PY="$(command -v python3 || command -v python)"'
    unpack_py, code_tar, sdk_tar, parameter_cfg_file = (
        q(f"{FILES_DIR}/{name}") for name in ("unpack.py", "code.tar.gz", "sdk.tar.gz", "parameter.cfg")
    )
    rc_file = q(f"{WORK_DIR}/rc")
    lines = ["set -e", py, f"mkdir -p {q(paths.sys_dir)} {q(WORK_DIR)}"]
    if storage is None:
        if not paths.code_in_image:
            lines.append(f'"$PY" {unpack_py} {code_tar} {q(paths.code_dir)}')
        lines += [
            f'"$PY" {unpack_py} {sdk_tar} {q(paths.sdk_dir)}',
            f"cp {parameter_cfg_file} {q(paths.sys_dir)}/parameter.cfg",
        ]
    else:
        if not paths.code_in_image:
            lines.append(f"cp -R {q(paths.sdk_dir.rsplit('/', 1)[0] + '/code')} {q(paths.code_dir)}")
        lines.append(f"mkdir -p {q(paths.log_dir or '')}")
    lines += [
        f"export PYTHONPATH={q(sdk_pythonpath(paths.sdk_dir))}${{PYTHONPATH:+:$PYTHONPATH}}",
        f"cd {q(paths.code_dir)}",
    ]
    if storage is None:
        lines.append(f"exec sh -c {q(command)}")
    else:
        log = f'{q(paths.log_dir or "")}/"$HOSTNAME".log'
        lines += [
            "set +e",
            f"{{ sh -c {q(command)} 2>&1; echo $? > {rc_file}; }} | tee -a {log}",
            f'exit "$(cat {rc_file})"',
        ]
    return "\n".join(lines) + "\n"


def config_map(name: str, labels: dict[str, str], code: PackedCode | None, parameter_cfg: str) -> dict[str, Any]:
    """The trial's ConfigMap: code (None: it is in the image) and SDK archives (binaryData),
    parameter.cfg, the extractor. Raises StorageError when it cannot fit."""
    sdk = pack_sdk()
    extractor = Path(unpack.__file__).read_text(encoding="utf-8")
    code_bytes = code.archive if code is not None else b""
    size = len(code_bytes) + len(sdk.archive) + len(parameter_cfg.encode()) + len(extractor.encode())
    if code is not None and size > CONFIG_MAP_LIMIT:
        raise StorageError(
            f"the packed trial code is {len(code.archive) / 1024:.0f} KiB ({code.file_count} files, "
            f"{code.total_bytes / 1024 / 1024:.1f} MB unpacked); a ConfigMap holds at most 1 MiB. Leave data and "
            "outputs out with .nniignore, put them in the image, or configure storage (nfs, azureStorage or pvc) "
            "so the code is read from a mounted share"
        )
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "labels": dict(labels)},
        "data": {"parameter.cfg": parameter_cfg, "unpack.py": extractor},
        "binaryData": {
            **({"code.tar.gz": base64.b64encode(code_bytes).decode()} if code is not None else {}),
            "sdk.tar.gz": base64.b64encode(sdk.archive).decode(),
        },
    }


# -- the Airflow side of mounted storage -----------------------------------------------------


def local_root(storage: KubernetesStorageConfig, experiment_id: str) -> Path:
    if storage.local_mount_point is None:
        raise StorageError(mount_hint(storage))
    return Path(storage.local_mount_point) / "trialflow" / experiment_id


def mount_hint(storage: KubernetesStorageConfig) -> str:
    source = {
        "nfs": f"the NFS export {storage.server}:{storage.path}",
        "azureStorage": f"the Azure file share {storage.azure_account}/{storage.azure_share}",
        "pvc": f"the volume of claim {storage.claim_name}" if storage.claim_name else "the claim's volume",
    }[storage.storage_type]
    return (
        f"storage {storage.storage_type} needs localMountPoint: mount {source} on the Airflow workers "
        "and give the folder (trialflow never runs sudo mount)"
    )


def check_storage(storage: KubernetesStorageConfig) -> None:
    """Fail before any trial starts when the storage cannot be used from here."""
    local_root(storage, "x")  # no localMountPoint: says what to mount
    mount = Path(storage.local_mount_point or "")
    if not mount.is_dir():
        raise StorageError(f"localMountPoint {mount} is not a folder here: {mount_hint(storage)}")
    if storage.storage_type == "azureStorage" and not storage.secret_name:
        vault = (
            f"e.g. kubectl create secret generic NAME --from-literal=azurestorageaccountname="
            f'{storage.azure_account} --from-literal=azurestorageaccountkey="$(az keyvault secret show '
            f"--vault-name {storage.key_vault_name or 'VAULT'} --name {storage.key_vault_key or 'KEY'} "
            '--query value -o tsv)"'
        )
        raise StorageError(f"azureStorage needs secretName, a Kubernetes secret with the share's key ({vault})")
    if not os.access(mount, os.W_OK | os.X_OK):  # checked, not tried: validating writes nothing
        raise StorageError(f"cannot write to localMountPoint {mount} (the trials' code and parameters go there)")


def stage_code(
    storage: KubernetesStorageConfig, experiment_id: str, code_dir: Path | None, exclude: tuple[Path, ...] = ()
) -> Path:
    """Copy the code (honouring .nniignore and NNI's limits; None: it is in the image) and the
    SDK to the storage, once per experiment; concurrent submitters race safely (the first
    complete copy wins)."""
    root = local_root(storage, experiment_id)
    stage_tree(root, code_dir, exclude)
    return root


def write_parameters(storage: KubernetesStorageConfig, experiment_id: str, trial_id: str, text: str) -> None:
    """parameter.cfg (``text``) atomically, before the job exists (nni polls for a non-empty file)."""
    folder = local_root(storage, experiment_id) / "trials" / trial_id
    (folder / "logs").mkdir(parents=True, exist_ok=True)
    write_parameter_file(folder, text)


def local_trial_dir(storage: KubernetesStorageConfig, experiment_id: str, trial_id: str) -> Path:
    """The trial's folder (its NNI_SYS_DIR and output) as the Airflow workers see it."""
    return local_root(storage, experiment_id) / "trials" / trial_id


def local_log_file(storage: KubernetesStorageConfig, experiment_id: str, trial_id: str, pod: str) -> Path:
    return local_root(storage, experiment_id) / "trials" / trial_id / "logs" / f"{pod}.log"


def remove_experiment(storage: KubernetesStorageConfig, experiment_id: str) -> None:
    shutil.rmtree(local_root(storage, experiment_id), ignore_errors=True)

"""NNI v1 configs (``trainingServicePlatform``, ``trial:``, ``machineList:`` ...) -> v2 dicts.

Follows NNI's own converter (nni/experiment/config/convert.py) key for key,
with its bug fixed (a machine's ``passphrase`` becomes ``sshPassphrase``
instead of being dropped), and reports unknown v1 keys by their v1 path
instead of silently carrying them into the v2 form.

Why one file of ~475 lines: it is one table-driven converter meant to be read
side by side with NNI's single convert.py; each platform's section is a short
function next to the tables it uses, and splitting them apart would only add an
import cycle between the converter and its sections.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from trialflow.config.base import normalize_key
from trialflow.config.errors import PathPart, Problem
from trialflow.config.model import TRIALFLOW_KEYS

#: v1 key -> v2 key (None: accepted and dropped, because trialflow has no use for it).
_TOP = {
    "authorName": None,
    "experimentName": "experimentName",
    "description": None,
    "trialConcurrency": "trialConcurrency",
    "maxExecDuration": "maxExperimentDuration",
    "maxTrialNum": "maxTrialNumber",
    "maxTrialDuration": "maxTrialDuration",
    "searchSpacePath": "searchSpaceFile",
    "searchSpace": "searchSpace",
    "useAnnotation": "useAnnotation",
    "nniManagerIp": "nniManagerIp",
    "logDir": "experimentWorkingDirectory",
    "logLevel": "logLevel",
    "debug": "debug",
    # NNI-manager internals with no meaning when trials are pulled, never pushed:
    "logCollection": None,
    "multiThread": None,
    "versionCheck": None,
    "experimentType": None,
    "multiPhase": None,
}
_SECTIONS = (
    "trainingServicePlatform",
    "tuner",
    "assessor",
    "advisor",
    "trial",
    "localConfig",
    "machineList",
    "remoteConfig",
    "paiConfig",
    "kubeflowConfig",
    "frameworkcontrollerConfig",
    "amlConfig",
    "dltsConfig",
    "hybridConfig",
    "sharedStorage",
)
_ALGORITHM = {
    "builtinTunerName": "name",
    "builtinAssessorName": "name",
    "builtinAdvisorName": "name",
    "classArgs": "classArgs",
    "codeDir": "codeDirectory",
    "classFileName": None,
    "className": None,
    "gpuIndices": None,
    "includeIntermediateResults": None,
}
_MACHINE = {
    "ip": "host",
    "port": "port",
    "username": "user",
    "passwd": "password",
    "sshKeyPath": "sshKeyFile",
    "passphrase": "sshPassphrase",
    "gpuIndices": "gpuIndices",
    "maxTrialNumPerGpu": "maxTrialNumberPerGpu",
    "useActiveGpu": "useActiveGpu",
    "pythonPath": "pythonPath",
}
_K8S_ROLE = {
    "replicas": "replicas",
    "command": "command",
    "gpuNum": "gpuNumber",
    "cpuNum": "cpuNumber",
    "memoryMB": "memorySize",
    "image": "dockerImage",
    "privateRegistryAuthPath": "privateRegistryAuthPath",
}
_FC_ROLE = {
    "name": "name",
    "taskNum": "taskNumber",
    "command": "command",
    "gpuNum": "gpuNumber",
    "cpuNum": "cpuNumber",
    "memoryMB": "memorySize",
    "image": "dockerImage",
    "frameworkAttemptCompletionPolicy": "frameworkAttemptCompletionPolicy",
    "privateRegistryAuthPath": "privateRegistryAuthPath",
}
_PLATFORM_NAMES = {
    "local": "local",
    "remote": "remote",
    "pai": "openpai",
    "openpai": "openpai",
    "kubeflow": "kubeflow",
    "frameworkcontroller": "frameworkcontroller",
    "aml": "aml",
    "dlts": "dlts",
    "adl": "adl",
    "hybrid": "hybrid",
}


def is_v1(raw: dict[str, Any]) -> bool:
    """NNI's own test: v1 configs name their platform at the top level."""
    return any(normalize_key(k) == "trainingserviceplatform" for k in raw)


class _Converter:
    def __init__(self) -> None:
        self.problems: list[Problem] = []

    def problem(self, path: tuple[PathPart, ...], message: str) -> None:
        self.problems.append(Problem(None, path, message))

    def rename(
        self, section: Any, path: tuple[PathPart, ...], table: Mapping[str, str | None], keep_unknown: bool = False
    ) -> dict[str, Any]:
        """Copy ``section`` under v2 names; unknown keys are problems unless kept."""
        if section is None:
            return {}
        if not isinstance(section, dict):
            self.problem(path, f"expected a mapping, got {type(section).__name__}")
            return {}
        lookup = {normalize_key(k): (k, v) for k, v in table.items()}
        out: dict[str, Any] = {}
        for key, value in section.items():
            hit = lookup.get(normalize_key(key))
            if hit is None:
                if keep_unknown:
                    out[key] = value
                else:
                    expected = ", ".join(k for k in table)
                    self.problem(path + (key,), f"unknown v1 key; expected one of: {expected}")
                continue
            if hit[1] is not None:
                out[hit[1]] = value
        return out


def _get(raw: dict[str, Any], key: str) -> Any:
    for k, v in raw.items():
        if normalize_key(k) == normalize_key(key):
            return v
    return None


def convert_v1(raw: dict[str, Any]) -> tuple[dict[str, Any], list[Problem]]:
    """Return the v2 dict and the problems found (paths are v1 paths)."""
    c = _Converter()
    known_top = set(map(normalize_key, list(_TOP) + list(_SECTIONS)))
    v2: dict[str, Any] = {}
    for key, value in raw.items():
        norm = normalize_key(key)
        if norm not in known_top:
            own = next((k for k in TRIALFLOW_KEYS if normalize_key(k) == norm), None)
            c.problem(
                (key,),
                f"{own} is trialflow's own key, and a v1 config holds NNI's v1 schema only: convert it "
                "to v2 (`trialflow convert`) and add the key there"
                if own
                else "unknown v1 key",
            )
            continue
        target = next((t for k, t in _TOP.items() if normalize_key(k) == norm), "")
        if target:
            v2[target] = value

    if _get(raw, "multiPhase"):
        c.problem(
            ("multiPhase",),
            "multi-phase trials are not supported (NNI 2.0 dropped them too); remove multiPhase or set it to false",
        )

    for name in ("tuner", "assessor", "advisor"):
        section = _get(raw, name)
        if section is not None:
            v2[name] = _algorithm(c, section, (name,))
            gpus = _get(section, "gpuIndices") if isinstance(section, dict) else None
            if gpus is not None and name in ("tuner", "advisor"):
                v2["tunerGpuIndices"] = gpus

    trial = _get(raw, "trial") or {}
    if not isinstance(trial, dict):
        c.problem(("trial",), f"expected a mapping, got {type(trial).__name__}")
        trial = {}
    for v1_key, v2_key in (
        ("command", "trialCommand"),
        ("codeDir", "trialCodeDirectory"),
        ("gpuNum", "trialGpuNumber"),
    ):
        value = _get(trial, v1_key)
        if value is not None:
            v2[v2_key] = value

    platform_raw = _get(raw, "trainingServicePlatform")
    platform = _PLATFORM_NAMES.get(str(platform_raw).lower()) if isinstance(platform_raw, str) else None
    if platform is None:
        c.problem(
            ("trainingServicePlatform",),
            f"unknown platform {platform_raw!r}; expected one of {', '.join(sorted(_PLATFORM_NAMES))}",
        )
    elif platform == "hybrid":
        hybrid = _get(raw, "hybridConfig") or {}
        names = _get(hybrid, "trainingServicePlatforms") if isinstance(hybrid, dict) else None
        if not isinstance(names, list) or not names:
            c.problem(("hybridConfig", "trainingServicePlatforms"), "hybrid needs a non-empty list of platforms")
        else:
            services = []
            for i, name in enumerate(names):
                sub = _PLATFORM_NAMES.get(str(name).lower())
                if sub is None or sub == "hybrid":
                    c.problem(("hybridConfig", "trainingServicePlatforms", i), f"unknown platform {name!r}")
                    continue
                services.append(_service(c, sub, raw, trial))
            v2["trainingService"] = services
    else:
        v2["trainingService"] = _service(c, platform, raw, trial)
    if _get(raw, "sharedStorage") is not None:
        v2["sharedStorage"] = _get(raw, "sharedStorage")
    return v2, c.problems


def _algorithm(c: _Converter, section: Any, path: tuple[PathPart, ...]) -> dict[str, Any]:
    out = c.rename(section, path, _ALGORITHM)
    if isinstance(section, dict):
        class_name, file_name = _get(section, "className"), _get(section, "classFileName")
        if class_name is not None:
            module = str(file_name)[:-3] if str(file_name or "").endswith(".py") else file_name
            out["className"] = f"{module}.{class_name}" if module else class_name
    return out


_TRIAL_COMMON = {"command": None, "codeDir": None, "gpuNum": None}


def _trial_keys(c: _Converter, trial: dict[str, Any], table: dict[str, str | None]) -> dict[str, Any]:
    return c.rename(trial, ("trial",), {**_TRIAL_COMMON, **table})


def _service(c: _Converter, platform: str, raw: dict[str, Any], trial: dict[str, Any]) -> dict[str, Any]:
    return _SERVICE_BUILDERS[platform](c, raw, trial)


def _local(c: _Converter, raw: dict[str, Any], trial: dict[str, Any]) -> dict[str, Any]:
    _trial_keys(c, trial, {})
    local = c.rename(
        _get(raw, "localConfig"),
        ("localConfig",),
        {"gpuIndices": "gpuIndices", "maxTrialNumPerGpu": "maxTrialNumberPerGpu", "useActiveGpu": "useActiveGpu"},
    )
    return {"platform": "local", **local}


def _remote(c: _Converter, raw: dict[str, Any], trial: dict[str, Any]) -> dict[str, Any]:
    _trial_keys(c, trial, {})
    machines_raw = _get(raw, "machineList")
    machines = []
    if isinstance(machines_raw, list):
        machines = [c.rename(m, ("machineList", i), _MACHINE) for i, m in enumerate(machines_raw)]
    elif machines_raw is not None:
        c.problem(("machineList",), "expected a list of machines")
    out: dict[str, Any] = {"platform": "remote", "machineList": machines}
    remote = c.rename(_get(raw, "remoteConfig"), ("remoteConfig",), {"reuse": "reuseMode"})
    out.update(remote)
    return out


def _openpai(c: _Converter, raw: dict[str, Any], trial: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"platform": "openpai"}
    out.update(
        c.rename(
            _get(raw, "paiConfig"),
            ("paiConfig",),
            {
                "userName": "username",
                "token": "token",
                "host": "host",
                "reuse": "reuseMode",
                "passWord": None,
                "cpuNum": "trialCpuNumber",
                "memoryMB": "trialMemorySize",
            },
        )
    )
    out.update(
        _trial_keys(
            c,
            trial,
            {
                "cpuNum": "trialCpuNumber",
                "memoryMB": "trialMemorySize",
                "image": "dockerImage",
                "virtualCluster": "virtualCluster",
                "paiStorageConfigName": "storageConfigName",
                "nniManagerNFSMountPath": "localStorageMountPoint",
                "containerNFSMountPath": "containerStorageMountPoint",
                "paiConfigPath": "openpaiConfigFile",
                "shmMB": None,
                "authFile": None,
                "portList": None,
            },
        )
    )
    return out


def _k8s_storage(c: _Converter, section: dict[str, Any], path: tuple[PathPart, ...]) -> dict[str, Any] | None:
    kind = _get(section, "storage") or ("nfs" if _get(section, "nfs") is not None else None)
    if kind is None:
        return None
    if kind == "nfs":
        nfs = c.rename(_get(section, "nfs"), path + ("nfs",), {"server": "server", "path": "path"})
        return {"storageType": "nfs", **nfs}
    if kind == "azureStorage":
        vault = c.rename(
            _get(section, "keyVault"), path + ("keyVault",), {"vaultName": "keyVaultName", "name": "keyVaultKey"}
        )
        share = c.rename(
            _get(section, "azureStorage"),
            path + ("azureStorage",),
            {"accountName": "azureAccount", "azureShare": "azureShare"},
        )
        return {"storageType": "azureStorage", **vault, **share}
    if kind == "pvc":
        pvc = c.rename(_get(section, "pvc"), path + ("pvc",), {"path": "localMountPoint", "claimName": "claimName"})
        return {"storageType": "pvc", **pvc}
    c.problem(path + ("storage",), f"unknown storage {kind!r}; expected nfs, azureStorage or pvc")
    return None


#: What both Kubernetes operators' v1 sections hold besides their own keys.
_K8S_SECTION_KEYS = ("storage", "nfs", "keyVault", "azureStorage", "uploadRetryCount", "namespace", "reuse")


def _k8s_section(
    c: _Converter, raw: dict[str, Any], name: str, platform: str, own: tuple[str, ...], extra: tuple[str, ...] = ()
) -> dict[str, Any]:
    """kubeflowConfig / frameworkcontrollerConfig -> the v2 section's common part: ``own`` keys
    copied as they are (namespace among them), ``reuse`` -> reuseMode, the storage converted;
    ``extra`` keys are accepted and dropped (NNI read them, trialflow has no use for them)."""
    section = _get(raw, name) or {}
    c.rename(section, (name,), dict.fromkeys((*_K8S_SECTION_KEYS, *own, *extra)))
    out: dict[str, Any] = {"platform": platform}
    for key in (*own, "namespace"):
        if _get(section, key) is not None:
            out[key] = _get(section, key)
    if _get(section, "reuse") is not None:
        out["reuseMode"] = _get(section, "reuse")
    storage = _k8s_storage(c, section, (name,))
    if storage:
        out["storage"] = storage
    return out


def _kubeflow(c: _Converter, raw: dict[str, Any], trial: dict[str, Any]) -> dict[str, Any]:
    out = _k8s_section(c, raw, "kubeflowConfig", "kubeflow", ("operator", "apiVersion"))
    _trial_keys(c, trial, {"worker": None, "ps": None, "master": None})
    for role in ("worker", "ps", "master"):
        if _get(trial, role) is not None:
            out[role] = c.rename(_get(trial, role), ("trial", role), _K8S_ROLE)
    return out


def _frameworkcontroller(c: _Converter, raw: dict[str, Any], trial: dict[str, Any]) -> dict[str, Any]:
    out = _k8s_section(
        c, raw, "frameworkcontrollerConfig", "frameworkcontroller", ("serviceAccountName", "configPath"), ("pvc",)
    )
    _trial_keys(c, trial, {"taskRoles": None})
    roles = _get(trial, "taskRoles")
    if isinstance(roles, list):
        out["taskRoles"] = []
        for i, role in enumerate(roles):
            path = ("trial", "taskRoles", i)
            converted = c.rename(role, path, _FC_ROLE)
            policy = converted.get("frameworkAttemptCompletionPolicy")
            if isinstance(policy, dict):
                converted["frameworkAttemptCompletionPolicy"] = c.rename(
                    policy,
                    path + ("frameworkAttemptCompletionPolicy",),
                    {
                        "minFailedTaskCount": "minFailedTaskCount",
                        "minSucceededTaskCount": "minSucceedTaskCount",
                        "minSucceedTaskCount": "minSucceedTaskCount",
                    },
                )
            out["taskRoles"].append(converted)
    return out


def _aml(c: _Converter, raw: dict[str, Any], trial: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"platform": "aml"}
    out.update(
        c.rename(
            _get(raw, "amlConfig"),
            ("amlConfig",),
            {
                "subscriptionId": "subscriptionId",
                "resourceGroup": "resourceGroup",
                "workspaceName": "workspaceName",
                "computeTarget": "computeTarget",
                "maxTrialNumPerGpu": "maxTrialNumberPerGpu",
            },
        )
    )
    out.update(_trial_keys(c, trial, {"image": "dockerImage"}))
    return out


def _dlts(c: _Converter, raw: dict[str, Any], trial: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"platform": "dlts"}
    out.update(
        c.rename(
            _get(raw, "dltsConfig"),
            ("dltsConfig",),
            {
                "dashboard": "dashboard",
                "cluster": "cluster",
                "team": "team",
                "email": "email",
                "password": "password",
                "gpuType": None,
            },
        )
    )
    out.update(_trial_keys(c, trial, {"image": "dockerImage"}))
    return out


def _adl(c: _Converter, raw: dict[str, Any], trial: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"platform": "adl"}
    converted = _trial_keys(
        c,
        trial,
        {
            "image": "dockerImage",
            "namespace": "namespace",
            "imagePullSecrets": "imagePullSecrets",
            "nfs": "nfs",
            "adaptive": "adaptive",
            "checkpoint": "checkpoint",
            "cpuNum": "cpuNumber",
            "memorySize": "memorySize",
        },
    )
    out.update(converted)
    return out


_SERVICE_BUILDERS: dict[str, Callable[[_Converter, dict[str, Any], dict[str, Any]], dict[str, Any]]] = {
    "local": _local,
    "remote": _remote,
    "openpai": _openpai,
    "kubeflow": _kubeflow,
    "frameworkcontroller": _frameworkcontroller,
    "aml": _aml,
    "dlts": _dlts,
    "adl": _adl,
}

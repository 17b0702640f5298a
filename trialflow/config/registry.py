"""Which training services exist: the built-ins and those other packages register.

A third-party package adds a platform with an entry point in the group
``trialflow.platforms`` whose value is a :class:`PlatformEntry`; then
``trainingService.platform: <name>`` validates against its config model and
runs on its implementation. See docs/implementing-a-platform.md.

It lives in config because a config is validated against these entries; an
implementation is named by a ``"module:Class"`` string and imported only when a
trial runs there, so nothing here imports a platform.
"""

from __future__ import annotations

import importlib
import logging
from dataclasses import dataclass
from functools import lru_cache
from importlib.metadata import entry_points
from typing import Any

from trialflow.config.platforms import BUILTIN_PLATFORM_CONFIGS, TrainingServiceConfig

ENTRY_POINT_GROUP = "trialflow.platforms"
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PlatformEntry:
    """A training service: its config section model and where its implementation lives.

    ``implementation`` is ``"package.module:Class"`` and is imported only when a
    trial actually runs there, so validating a Kubernetes config does not need
    the Kubernetes client installed (the cosmos way of optional SDKs).
    """

    name: str
    config_model: type[TrainingServiceConfig]
    implementation: str | None
    #: Said when ``implementation`` is None: why this platform cannot run yet.
    unavailable_reason: str | None = None
    #: Its trials are processes of the host that started them (only that host can follow,
    #: re-attach or stop them): the DAG then pins the experiment's tasks to one host's queue
    #: under a multi-host executor and follows its trials in the worker (trialflow.platforms.hosts).
    #: Known here, from the entry, without importing the platform.
    host_bound: bool = False

    def load(self) -> type[Any]:
        """The platform's class (a trialflow.platforms.base.TrainingPlatform: config sits below
        the platforms and names none of them)."""
        if self.implementation is None:
            raise PlatformUnavailable(self.name, self.unavailable_reason or "it has no implementation")
        module_name, _, attr = self.implementation.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise PlatformUnavailable(self.name, f"importing {module_name} failed: {exc}") from exc
        return getattr(module, attr)


class PlatformUnavailable(RuntimeError):
    def __init__(self, name: str, reason: str):
        super().__init__(f"training service platform {name!r} cannot run here: {reason}")
        self.name = name


_NOT_YET = "trialflow validates this platform's config, but its runner is not part of this release yet"

_BUILTIN_IMPLEMENTATIONS: dict[str, str] = {
    "local": "trialflow.platforms.local:LocalPlatform",
    "remote": "trialflow.platforms.remote.platform:RemotePlatform",
    "kubeflow": "trialflow.platforms.kubernetes.kubeflow:KubeflowPlatform",
    "kubeflow-trainer": "trialflow.platforms.kubernetes.trainer:KubeflowTrainerPlatform",
    "frameworkcontroller": "trialflow.platforms.kubernetes.frameworkcontroller:FrameworkControllerPlatform",
    "adl": "trialflow.platforms.kubernetes.adaptdl:AdaptdlPlatform",
    "openpai": "trialflow.platforms.openpai:OpenpaiPlatform",
    "dlts": "trialflow.platforms.dlts:DltsPlatform",
    "aml": "trialflow.platforms.aml:AmlPlatform",
}


_BUILTIN_HOST_BOUND = frozenset({"local"})


def _builtin_entries() -> dict[str, PlatformEntry]:
    return {
        name: PlatformEntry(
            name,
            model,
            _BUILTIN_IMPLEMENTATIONS.get(name),
            None if name in _BUILTIN_IMPLEMENTATIONS else _NOT_YET,
            host_bound=name in _BUILTIN_HOST_BOUND,
        )
        for name, model in BUILTIN_PLATFORM_CONFIGS.items()
    }


def is_host_bound(name: str) -> bool:
    """Whether platform ``name`` says its trials live on the host that started them (an unknown
    name is not: the config check reports it)."""
    entry = platform_entries().get(name)
    return bool(entry and entry.host_bound)


@lru_cache(maxsize=1)
def platform_entries() -> dict[str, PlatformEntry]:
    """Built-ins first; an installed plugin may add names but not replace a built-in."""
    entries = _builtin_entries()
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            entry: Any = ep.load()
        except Exception as exc:  # a broken plugin must not break every other config
            log.warning("trialflow platform plugin %s failed to load: %s", ep.value, exc)
            continue
        if not isinstance(entry, PlatformEntry):
            log.warning("trialflow platform plugin %s is not a PlatformEntry; ignored", ep.value)
            continue
        if entry.name in entries:
            log.warning("trialflow platform plugin %s tries to replace built-in %r; ignored", ep.value, entry.name)
            continue
        entries[entry.name] = entry
    return entries


def get_platform_entry(name: str) -> PlatformEntry:
    entries = platform_entries()
    if name not in entries:
        raise PlatformUnavailable(name, f"unknown platform; known: {', '.join(sorted(entries))}")
    return entries[name]

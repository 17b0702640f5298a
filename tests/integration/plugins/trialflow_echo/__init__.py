"""A tiny third-party platform, as docs/implementing-a-platform.md describes: its own config
section (a required ``greeting``), registered through the ``trialflow.platforms`` entry point."""

from __future__ import annotations

from typing import ClassVar, Literal

from trialflow.config.platforms import TrainingServiceConfig
from trialflow.config.registry import PlatformEntry
from trialflow.platforms.base import TrialSpec
from trialflow.platforms.local import LocalPlatform


class EchoConfig(TrainingServiceConfig):
    platform: Literal["echo"] = "echo"
    greeting: str


class EchoPlatform(LocalPlatform):
    """Local processes that also receive the configured greeting."""

    name: ClassVar[str] = "echo"

    def build_env(self, spec: TrialSpec) -> dict[str, str]:
        env = super().build_env(spec)
        env["ECHO_GREETING"] = self.config.greeting  # type: ignore[attr-defined]
        env["NNI_PLATFORM"] = "local"  # metrics through the local file channel
        return env


# Its trials are processes of this host (host_bound), and its log files are LocalPlatform's:
# the DAG pins it under a multi-host executor and the trial page shows its log tail, with
# nothing in trialflow naming "echo".
ENTRY = PlatformEntry("echo", EchoConfig, "trialflow_echo:EchoPlatform", host_bound=True)

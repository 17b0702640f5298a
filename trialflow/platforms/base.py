"""The platform contract every training service implements, and its small value types.

Handles and cursors are plain JSON dicts because they travel through XCom and
trigger kwargs and must survive a scheduler, worker or triggerer restart.
"""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, ClassVar, Mapping, Protocol, runtime_checkable

from trialflow.trial.protocol import Metric

TrialHandle = dict[str, Any]
Cursor = dict[str, Any]


class TrialStatus(str, Enum):
    """NNI's trial states; platforms map theirs onto these with a declarative table."""

    WAITING = "WAITING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    USER_CANCELED = "USER_CANCELED"
    SYS_CANCELED = "SYS_CANCELED"
    EARLY_STOPPED = "EARLY_STOPPED"

    @property
    def is_terminal(self) -> bool:
        return self not in (TrialStatus.WAITING, TrialStatus.RUNNING)


TERMINAL_STATUSES = frozenset(s for s in TrialStatus if s.is_terminal)
CANCEL_STATUSES = frozenset({TrialStatus.USER_CANCELED, TrialStatus.SYS_CANCELED, TrialStatus.EARLY_STOPPED})


def experiment_id_for(dag_id: str, run_id: str) -> str:
    """8 lowercase characters, like NNI's experiment ids, stable for a DAG run (so a cleared
    run continues the same experiment) and valid in Kubernetes names."""
    digest = hashlib.sha256(f"{dag_id}\0{run_id}".encode()).hexdigest()
    return "e" + digest[:7]


def trial_id_for(experiment_id: str, trial_index: int) -> str:
    """Deterministic per (experiment, run, index): a retried task re-attaches to its job."""
    return f"{experiment_id}-{trial_index:04d}"


@dataclass
class TrialSpec:
    """Everything a platform needs to start one trial."""

    experiment_id: str
    trial_id: str
    sequence: int
    parameter_id: int
    parameters: dict[str, Any]
    command: str
    code_dir: Path
    gpu_number: int = 0
    env: dict[str, str] = field(default_factory=dict)
    #: Files of code_dir that are never shipped to a machine or pod (the experiment's config:
    #: it may hold passwords and tokens).
    code_excludes: tuple[Path, ...] = ()


@dataclass
class TrialUpdate:
    """What a poll found: the status now and only the metrics new since the cursor."""

    status: TrialStatus
    metrics: list[Metric]
    cursor: Cursor
    message: str | None = None
    exit_code: int | None = None
    #: Why malformed metric records (or over-long output lines) among the new bytes were
    #: skipped; the follow loop warns once each and counts them in the trial's message.
    skipped: list[str] = field(default_factory=list)


@runtime_checkable
class TrainingPlatform(Protocol):
    """One training service. Implementations live one per module in ``trialflow.platforms``.

    ``submit`` must be idempotent: the same trial id re-attaches to the job it
    already started instead of starting a second one. ``poll`` must return
    only metrics after ``cursor`` and the cursor to use next time.
    """

    name: ClassVar[str]

    @classmethod
    def from_config(cls, service_config: Any, experiment_dir: Path) -> "TrainingPlatform": ...

    def prepare(self, experiment_id: str) -> None: ...

    def submit(self, spec: TrialSpec) -> TrialHandle: ...

    async def poll(self, handle: TrialHandle, cursor: Cursor) -> TrialUpdate: ...

    def cancel(self, handle: TrialHandle, status: TrialStatus, reason: str) -> None: ...

    def cleanup(self, experiment_id: str) -> None: ...

    def render(self, spec: TrialSpec) -> Mapping[str, Any]: ...


async def cancel_async(platform: TrainingPlatform, handle: TrialHandle, status: TrialStatus, reason: str) -> None:
    """Cancel from async code (the triggerer) without blocking its event loop."""
    await asyncio.to_thread(platform.cancel, handle, status, reason)

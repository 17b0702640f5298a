"""The platform contract every training service implements, and its small value types.

One abstract base, :class:`TrainingPlatform`: a platform module subclasses it
and fills in ``submit``, ``poll``, ``stop`` and ``render``; everything else
has a default (``prepare``, ``cleanup``, ``preflight``, ``wait_for_change``,
``use_shared_storage``), so callers never probe for a capability. The
contract is async because the triggerer is; Airflow's synchronous code (the
operator, the sensor's pokes, the end step) uses the ``*_sync`` faces, which
run on one background event loop per process so connections are shared.

Handles and cursors are plain JSON dicts because they travel through XCom and
trigger kwargs and must survive a scheduler, worker or triggerer restart.
Connections named in a config (``sshConnId``, ``kubernetesConnId``) reach a
platform as :class:`Connections`: factories the Airflow layer injects, so no
platform imports Airflow.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import posixpath
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from trialflow.platforms.event_loop import run_sync
from trialflow.platforms.leftovers import MARK_VAR, trial_mark
from trialflow.trial.env import trial_env
from trialflow.trial.handle import TrialHandle
from trialflow.trial.protocol import Metric
from trialflow.trial.status import CANCEL_STATUSES, TERMINAL_STATUSES, TrialStatus

if TYPE_CHECKING:
    from trialflow.config.model import SharedStorageConfig

__all__ = [
    "CANCEL_STATUSES",
    "TERMINAL_STATUSES",
    "Connections",
    "Cursor",
    "TrainingPlatform",
    "TrialHandle",
    "TrialSpec",
    "TrialStatus",
    "TrialUpdate",
    "experiment_id_for",
    "handle_location",
    "handle_log_files",
    "job_name_for",
    "trial_id_for",
]

Cursor = dict[str, Any]
ConfigT = TypeVar("ConfigT")


#: Characters of an experiment id after its "e": base32 of a SHA-256, 80 bits. NNI's 8
#: characters (28 bits here before) let two manual runs of one DAG a few milliseconds apart
#: share an id, and let an editor of one DAG search offline (minutes on one core) for a run id
#: of their own that lands on another DAG's next scheduled experiment. 2**80 is out of reach
#: for either; trial ids (``<id>-0000``) stay well inside Kubernetes' 63-character names.
EXPERIMENT_ID_CHARS = 16


def experiment_id_for(dag_id: str, run_id: str, group: str | None = None) -> str:
    """Stable for a DAG run (so a cleared run continues the same experiment), lowercase letters
    and digits (valid in Kubernetes names, job names and paths), and wide enough not to collide.
    ``group``: the experiment's task group, when it is one of a DAG's (each its own experiment);
    a whole-DAG experiment keeps the id it always had."""
    owner = f"{dag_id}\0{run_id}" if group is None else f"{dag_id}\0{run_id}\0{group}"
    digest = hashlib.sha256(owner.encode()).digest()
    return "e" + base64.b32encode(digest).decode("ascii").lower()[:EXPERIMENT_ID_CHARS]


def trial_id_for(experiment_id: str, trial_index: int) -> str:
    """Deterministic per (experiment, run, index): a retried task re-attaches to its job."""
    return f"{experiment_id}-{trial_index:04d}"


def job_name_for(trial_id: str) -> str:
    """A service job's name from the trial id alone (OpenPAI, DLTS, Azure ML accept letters,
    digits and underscores): the same trial always asks for the same job."""
    return "trialflow_" + trial_id.replace("-", "_")


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
    #: parameter.cfg's parameter_source: "algorithm" (the tuner's), "customized" (a person's).
    parameter_source: str = "algorithm"
    #: Population Based Training: the parameters also name NNI's load and save folders, which
    #: exist only where the trial runs (trialflow.trial.wire.PBT_SAVE_DIR).
    checkpoint_dirs: bool = False
    #: The checkpoint the trial starts from at its first launch (a PBT parent's): the platform
    #: fetches it as a restart's and names it in RESUME_FOLDER_VAR. None: it starts fresh.
    start_from: Resume | None = None

    @property
    def resumes(self) -> bool:
        """Whether the checkpoint it starts from is already named (a restart's, or start_from
        fetched by an earlier step of the same launch)."""
        from trialflow.trial.wire import RESUME_FOLDER_VAR

        return RESUME_FOLDER_VAR in self.env

    def resuming(self, folder: str, resume: Resume) -> TrialSpec:
        """This trial starting from ``resume``'s checkpoint, fetched to ``folder`` (its path
        where the trial runs): every platform names it to the trial the same way."""
        from dataclasses import replace

        from trialflow.trial.wire import RESUME_FOLDER_VAR, RESUME_STEP_VAR

        return replace(self, env={**self.env, RESUME_FOLDER_VAR: folder, RESUME_STEP_VAR: str(resume.step)})

    def parameters_at(self, output_dir: str) -> dict[str, Any]:
        """The parameters as the trial reads them, its output folder being ``output_dir`` on
        its machine: NNI PBT's folders resolved there (the load folder is the fetched
        checkpoint in the environment, else a folder that holds nothing)."""
        if not self.checkpoint_dirs:
            return self.parameters
        from trialflow.trial.wire import PBT_LOAD_KEY, PBT_NO_LOAD_DIR, PBT_SAVE_DIR, PBT_SAVE_KEY, RESUME_FOLDER_VAR

        load = self.env.get(RESUME_FOLDER_VAR) or posixpath.join(output_dir, PBT_NO_LOAD_DIR)
        return {**self.parameters, PBT_LOAD_KEY: load, PBT_SAVE_KEY: posixpath.join(output_dir, PBT_SAVE_DIR)}

    def parameter_cfg(self, output_dir: str = "") -> str:
        """parameter.cfg's content for this trial (every platform writes exactly this), its
        output folder being ``output_dir`` where it runs."""
        from trialflow.trial.protocol import parameter_text

        parameters = self.parameters_at(output_dir)
        return parameter_text(self.parameter_id, parameters, source=self.parameter_source)

    def environment(
        self,
        platform: str,
        sys_dir: str,
        code_dir: str,
        gpu_indices: list[int] | None = None,
        base: Mapping[str, str] | None = None,
        marked: bool = True,
    ) -> dict[str, str]:
        """The trial's environment on any platform: NNI's variables over ``base`` (os.environ
        when None), then the config's own variables, so the user's word wins over ours,
        except for the leftover mark (``marked``), which must stay what cleanup looks for.

        ``gpu_indices`` None leaves CUDA_VISIBLE_DEVICES unset (a device plugin decides);
        a list, even empty, sets it, since NNI hides every GPU from a trial that asked none.
        """
        env = trial_env(
            platform=platform,
            experiment_id=self.experiment_id,
            trial_id=self.trial_id,
            sys_dir=sys_dir,
            output_dir=sys_dir,
            sequence=self.sequence,
            code_dir=code_dir,
            gpu_indices=gpu_indices,
            base=base,
        )
        if gpu_indices is None:
            env.pop("CUDA_VISIBLE_DEVICES", None)
        env.update(self.env)
        if marked:
            env[MARK_VAR] = trial_mark(sys_dir)
        return env


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
    #: An ended job's infrastructure fault as the platform saw it (a pod evicted or OOM-killed,
    #: its node gone), where no exit code says it; ended_by_fault reads it.
    fault: str | None = None


def handle_location(handle: Mapping[str, Any]) -> str | None:
    """Where a trial runs, said from its handle's common fields (a platform that knows better
    puts its own ``location`` in the handle)."""
    if handle.get("location"):
        return str(handle["location"])
    if handle.get("namespace") or handle.get("name"):
        return f"Kubernetes {handle.get('kind', 'job')} {handle.get('namespace', '')}/{handle.get('name', '')}"
    where = [
        f"on {handle['host']}" if handle.get("host") else "",
        f"in {handle['trial_dir']}" if handle.get("trial_dir") else "",
    ]
    return " ".join(w for w in where if w) or None


#: The local platform's files, for handles stored before handles said which files they have.
_LEGACY_LOG_FILES = {"local": ("stdout", "stderr")}


def handle_log_files(handle: Mapping[str, Any]) -> list[str]:
    """The files of the trial's folder that the pages may show (see TrainingPlatform.log_files)."""
    named = handle.get("log_files")
    if isinstance(named, list):
        return [str(n) for n in named]
    return list(_LEGACY_LOG_FILES.get(str(handle.get("platform")), ()))


@dataclass(frozen=True)
class Resume:
    """The checkpoint a restarted trial starts from: its step (the number of intermediate
    results reported before it) and ``fetch``, which writes its files into a new folder of this
    machine (checked against the store's manifest); the platform puts them where the trial can
    read them and names that folder in the trial's environment."""

    step: int
    fetch: Callable[[Path], Path]


@dataclass(frozen=True)
class Connections:
    """How a platform opens what a config names by Airflow connection id. The Airflow layer
    fills these (trialflow.hooks.connections); outside Airflow they stay None and such a config
    says it needs Airflow."""

    #: sshConnId -> an open asyncssh connection (the SSH provider's SSHHookAsync).
    ssh: Callable[[str], Awaitable[Any]] | None = None
    #: kubernetesConnId -> a kubernetes_asyncio Configuration (the cncf-kubernetes provider's hook).
    kubernetes: Callable[[str], Awaitable[Any]] | None = None
    #: a token's connection id (OpenPAI's tokenConnId) -> the token: the connection's password.
    token: Callable[[str], Awaitable[str]] | None = None
    #: The checkpoints' store (trialflow.config.checkpoints.CheckpointsConfig, the experiments'
    #: working directory) -> the root path they are kept under: Airflow's ObjectStoragePath with
    #: the connection ``connId`` names (trialflow.hooks.artifact_store). Outside Airflow, None:
    #: only the default store, a plain folder, can be reached.
    artifacts: Callable[[Any, Path], Any] | None = None
    #: Any other kind, by name: a plug-in platform with a credential of its own asks
    #: ``opener(kind)``. The Airflow layer puts ``"connection"`` here (connection id -> Airflow's
    #: Connection: host, login, password, extra), from which a plug-in builds its own client.
    others: Mapping[str, Callable[[str], Awaitable[Any]]] = field(default_factory=dict)

    def opener(self, kind: str) -> Callable[[str], Awaitable[Any]] | None:
        """The factory for credential ``kind`` (a built-in field's name or one of ``others``),
        None where nothing provides it (outside Airflow)."""
        if kind in ("ssh", "kubernetes", "token"):
            return getattr(self, kind)
        return self.others.get(kind)


class OutputTooLarge(RuntimeError):
    """A trial's output folder holds more than its bound (maxCheckpointSize, maxArtifactsSize):
    it is not copied from the trial's machine."""


class PlatformUnreachable(RuntimeError):
    """The platform did not answer (its machine or API server down, the network cut) after the
    platform's own retries: the trial itself may be fine. Following asks again for a while
    (trialflow.experiment.follow.UNREACHABLE_GRACE) instead of failing the task at once. Each platform's
    error for this case subclasses both its own error and this one."""


class TrainingPlatform(ABC, Generic[ConfigT]):
    """One training service; one module per platform subclasses this.

    ``submit`` must be idempotent: the same trial id re-attaches to the job it
    already started instead of starting a second one. ``poll`` returns only the
    metrics after ``cursor`` and the cursor to use next time. ``stop`` stops a
    running trial so that it then polls as the status ``cancel`` was given.
    """

    name: ClassVar[str]
    #: Whether trialflow can keep this platform's checkpoints and restart its trials from them
    #: (fetch_output, ended_by_fault and restart below); the ``checkpoints`` key is refused
    #: for a platform without (checkpoints_refused: a platform may need more of its config).
    keeps_checkpoints: ClassVar[bool] = False
    #: Whether a restarted trial's output goes on in the same place (its metrics read on from
    #: the follow cursor: local's one append-only file), or starts afresh (a folder or job of
    #: its own: the cursor starts again).
    restart_keeps_output: ClassVar[bool] = False
    #: Files in a trial's folder (its handle's ``trial_dir``) that Airflow's own machines can
    #: read: the trial page shows their last lines. Empty where the folder lives elsewhere (a
    #: remote machine, a pod).
    log_files: ClassVar[tuple[str, ...]] = ()

    def __init__(self, config: ConfigT, experiment_dir: Path, connections: Connections | None = None):
        self.config = config
        self.experiment_dir = Path(experiment_dir)
        self.connections = connections or Connections()

    @classmethod
    def checkpoints_refused(cls, config: Any) -> str | None:
        """Why this platform, so configured, cannot keep checkpoints (None: it can)."""
        if cls.keeps_checkpoints:
            return None
        return (
            f"trialflow does not yet keep checkpoints or restart trials on {cls.name} (it does on local, "
            "remote, OpenPAI, DLTS and the Kubernetes platforms with mounted storage)"
        )

    @classmethod
    def from_config(
        cls, config: ConfigT, experiment_dir: Path, connections: Connections | None = None
    ) -> TrainingPlatform[ConfigT]:
        return cls(config, experiment_dir, connections)

    # -- what each platform provides -----------------------------------------------------------

    @abstractmethod
    async def submit(self, spec: TrialSpec) -> TrialHandle: ...

    @abstractmethod
    async def poll(self, handle: TrialHandle, cursor: Cursor) -> TrialUpdate: ...

    @abstractmethod
    async def stop(self, handle: TrialHandle, status: TrialStatus, reason: str) -> None:
        """Stop the trial (``cancel`` has checked ``status``); it then polls as ``status``."""

    @abstractmethod
    def render(self, spec: TrialSpec) -> Mapping[str, Any]:
        """What ``submit`` would send, without sending it (``trialflow render``); secrets masked."""

    # -- capabilities with defaults ------------------------------------------------------------

    def preflight(self, code_dir: Path, excludes: tuple[Path, ...] = ()) -> list[tuple[tuple[str | int, ...], str]]:
        """What would stop a trial here, found without contacting the platform (validate and
        DAG parsing call it): (config key path, message) pairs; none by default."""
        return []

    def use_shared_storage(self, shared: SharedStorageConfig | None) -> None:
        """NNI's sharedStorage; platforms that can read code in place override this."""

    async def prepare(self, experiment_id: str) -> None:
        """Check access and stage what trials share, once per experiment start."""

    async def cleanup(self, experiment_id: str) -> None:
        """Remove what the experiment left on the platform (``cleanup=True``)."""

    async def wait_for_change(self, handle: TrialHandle, cursor: Cursor, timeout: float) -> None:
        """The follow loop's pause between polls; a platform told of changes returns early."""
        await asyncio.sleep(timeout)

    # -- checkpoints (where keeps_checkpoints) ------------------------------------------------

    async def fetch_output(
        self, handle: TrialHandle, relative: str, scratch: Path, max_bytes: int | None = None
    ) -> Path:
        """A folder of this machine holding the trial's output folder ``relative`` (a
        checkpoint's ``checkpoints/<step>``, its ``artifacts``): the trial's own folder where
        Airflow reads it in place, else a copy made under ``scratch`` of at most ``max_bytes``
        (OutputTooLarge past it: a copy is bounded before it is made; the keeper bounds each file)."""
        raise NotImplementedError(f"platform {self.name} does not keep checkpoints")

    def ended_by_fault(self, update: TrialUpdate) -> bool:
        """Whether a FAILED trial's job ended by the infrastructure (its process killed by a
        signal nobody asked for, its machine or pod gone), not by its own exit: such a trial
        is restarted from its last checkpoint."""
        return False

    async def restart(self, handle: TrialHandle, spec: TrialSpec, attempt: int, resume: Resume | None) -> TrialHandle:
        """Start trial ``spec`` again as attempt ``attempt`` (1 for the first restart) after its
        job ended by a fault, from the checkpoint ``resume`` names (None: from scratch). The
        same trial id and parameters; its metrics are read on from the follow cursor, or from
        their start (restart_keeps_output). Idempotent like submit: a second call for the same
        attempt re-attaches to the job the first started."""
        raise NotImplementedError(f"platform {self.name} does not restart trials")

    # -- shared -----------------------------------------------------------------------------

    def describe(self, handle: TrialHandle) -> TrialHandle:
        """The handle as submit returned it, plus what the pages show without knowing which
        platform wrote it: where the trial runs (``location``) and which of its files they may
        read (``log_files``). Written once, at submit, into the store with the handle."""
        described = handle.copy()
        described.setdefault("location", handle_location(handle))
        if self.log_files and handle.get("trial_dir"):
            described["log_files"] = list(self.log_files)
        return described

    async def cancel(self, handle: TrialHandle, status: TrialStatus, reason: str) -> None:
        """User cancel, early stop or timeout; ``status`` says which (a cancel status)."""
        if status not in CANCEL_STATUSES:
            raise ValueError(f"cancel status must be one of {sorted(s.value for s in CANCEL_STATUSES)}")
        await self.stop(handle, status, reason)

    # Synchronous faces for Airflow's synchronous code, on the process's platform loop.

    def prepare_sync(self, experiment_id: str) -> None:
        run_sync(self.prepare(experiment_id))

    def submit_sync(self, spec: TrialSpec) -> TrialHandle:
        return run_sync(self.submit(spec))

    def poll_sync(self, handle: TrialHandle, cursor: Cursor) -> TrialUpdate:
        return run_sync(self.poll(handle, cursor))

    def cancel_sync(self, handle: TrialHandle, status: TrialStatus, reason: str) -> None:
        run_sync(self.cancel(handle, status, reason))

    def cleanup_sync(self, experiment_id: str) -> None:
        run_sync(self.cleanup(experiment_id))

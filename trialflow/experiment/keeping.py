"""A followed trial's checkpoints kept in the store as it saves them, and its job started again
from the last one after a fault. No Airflow: the store's root comes from the Airflow layer
(Connections.artifacts) or, outside it, is the default folder.

Level-triggered, like the rest of following: the store holds each restart before the job is
started again (``Trial.restarts``), and whoever follows the trial next (the worker, the
triggerer after a restart, a retried task) and finds a restart recorded that its handle has
not reached carries it out: the platform's restart is idempotent per attempt, so a restart is
neither lost nor made twice when its follower dies halfway.
"""

from __future__ import annotations

import logging
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trialflow.blocking import in_thread
from trialflow.checkpoints.artifacts import TrialArtifacts
from trialflow.checkpoints.copy_time import CopyTimedOut, allowed_seconds, folder_bytes, within
from trialflow.checkpoints.keeper import TrialCheckpoints
from trialflow.checkpoints.restarts import restart_verdict
from trialflow.config.checkpoints import default_folder
from trialflow.experiment import job_stops
from trialflow.platforms.base import CANCEL_STATUSES, Resume, TrialHandle, TrialStatus, TrialUpdate
from trialflow.store.records import Restart
from trialflow.trial.wire import ARTIFACTS_DIR, PBT_SAVE_DIR, checkpoint_folder

if TYPE_CHECKING:
    from trialflow.checkpoints.keeper import StoragePath
    from trialflow.config.checkpoints import CheckpointsConfig
    from trialflow.experiment import Experiment
    from trialflow.platforms.base import Connections, TrainingPlatform
    from trialflow.store.experiment_store import ExperimentStore
    from trialflow.store.records import Lineage

log = logging.getLogger(__name__)


def _steps(steps: list[int]) -> str:
    """Steps as a person reads them: "4, 5, 6" or "4-9 (6)" when there are many."""
    if len(steps) <= 5:
        return ", ".join(str(s) for s in steps)
    return f"{min(steps)}-{max(steps)} ({len(steps)})"


class ArtifactStoreNeedsAirflow(RuntimeError):
    """A store URL is named but nothing here can open its connection."""


def artifact_root(checkpoints: CheckpointsConfig, workdir: Path, connections: Connections | None) -> StoragePath:
    """The root the experiment's checkpoints go under: the Airflow layer's (an ObjectStoragePath
    with the store's connection), else the default folder as a plain path."""
    if connections is not None and connections.artifacts is not None:
        root: StoragePath = connections.artifacts(checkpoints, workdir)
        return root
    if checkpoints.store is not None:
        raise ArtifactStoreNeedsAirflow(
            f"checkpoints.store {checkpoints.scheme}:// is reached through Airflow's connections: "
            "follow the trial from Airflow"
        )
    folder: StoragePath = default_folder(workdir)
    return folder


@dataclass
class TrialKeeping:
    """Keeping and restarts for one followed trial (see module)."""

    experiment: Experiment
    platform: TrainingPlatform[Any]
    store: ExperimentStore
    storage_id: int
    checkpoints: TrialCheckpoints
    artifacts: TrialArtifacts
    run_id: str = ""
    #: What the trial's message adds: a checkpoint that could not be kept, why it was not restarted.
    notes: list[str] = field(default_factory=list)
    #: Why the store was given up on for this follow (a copy it did not take in time), or None:
    #: later checkpoints are not tried until the trial ends (``keep_pending``, one more try).
    away: str | None = None
    #: The newest checkpoint not kept while the store was away: (step, its folder if not the SDK's).
    pending: tuple[int, str | None] | None = None
    #: The checkpoints not tried while the store was away (said once, in the trial's message).
    not_tried: list[int] = field(default_factory=list)

    @property
    def root(self) -> StoragePath:
        return self.checkpoints.root

    @property
    def config(self) -> CheckpointsConfig:
        assert self.experiment.config.checkpoints is not None
        return self.experiment.config.checkpoints

    async def keep(self, handle: TrialHandle, step: int, relative: str | None = None) -> None:
        """Copy checkpoint ``step`` into the store, then apply the retention rule. A store that
        refuses is said in the trial's message, never a failed trial: the checkpoint stays in
        the trial's folder and the next one is tried. ``relative``: the folder it is in, when
        not the SDK's ``checkpoints/<step>`` (NNI PBT's save folder).

        Each copy has its time (trialflow.checkpoints.copy_time); one the store did not take in
        time makes the store away for this follow: the later ones wait for the trial's end,
        where the newest is tried once more (``keep_pending``)."""
        if self.away is not None:
            self.pending = (step, relative)
            self.not_tried.append(step)
            return
        try:
            with tempfile.TemporaryDirectory(prefix="trialflow-checkpoint-") as scratch:
                folder = await self.platform.fetch_output(
                    handle, relative or checkpoint_folder(step), Path(scratch), self.checkpoints.max_bytes
                )
                if relative is not None and not (Path(folder) / relative).is_dir():
                    return  # it saved nothing there (an SDK trial keeps its own as it goes)
                size = await in_thread(folder_bytes, folder, relative or checkpoint_folder(step))
                await within(
                    allowed_seconds(size),
                    f"checkpoint {step}",
                    lambda: self.checkpoints.keep(folder, step, relative),
                )
            metrics = await in_thread(self.store.intermediate_values, self.storage_id)
            await in_thread(
                self.checkpoints.prune,
                metrics,
                self.config.keep_last,
                self.config.keep_best,
                self.experiment.config.optimize_mode,
            )
        except CopyTimedOut as exc:
            self.away, self.pending = str(exc), (step, relative)
            note = f"checkpoint {step} not kept: {exc}"
            log.warning("Trial %s: %s", handle.get("trial_id"), note)
            self.notes.append(note[:500])
        except Exception as exc:
            note = f"checkpoint {step} not kept: {exc}"
            log.warning("Trial %s: %s", handle.get("trial_id"), note)
            self.notes.append(note[:500])

    async def keep_pending(self, handle: TrialHandle) -> None:
        """At the trial's end, the later pass: the newest checkpoint not kept while the store was
        away is tried once more (still in the trial's folder); the ones before it are said."""
        if self.away is None or self.pending is None:
            return
        step, relative = self.pending
        skipped = [s for s in self.not_tried if s != step]
        if skipped:
            self.notes.append(
                f"checkpoint(s) {_steps(skipped)} not tried: the store had not taken an earlier one in time"
            )
        self.away, self.pending, self.not_tried = None, None, []
        await self.keep(handle, step, relative)

    async def keep_saved(self, handle: TrialHandle) -> None:
        """A PBT trial's save folder (NNI's ``save_checkpoint_dir``), kept as its checkpoint at
        the step it reached when it ends: what its children load. Code written for NNI saves it
        after its last result, where no checkpoint record can name it."""
        if not self.experiment.population_based:
            return
        record = await in_thread(self.store.trial, self.storage_id)
        await self.keep(handle, record.intermediate_count, PBT_SAVE_DIR)

    async def keep_artifacts(self, handle: TrialHandle) -> None:
        """Copy what the ended trial wrote in its ``artifacts`` folder into the store (said
        in its message when the store refuses, as a checkpoint is). Not tried when the store did
        not take the trial's last checkpoint in time, even once more: it would not now."""
        if self.away is not None:
            self.notes.append("artifacts not kept: the store had not taken the trial's checkpoint in time")
            return
        try:
            with tempfile.TemporaryDirectory(prefix="trialflow-artifacts-") as scratch:
                folder = await self.platform.fetch_output(
                    handle, ARTIFACTS_DIR, Path(scratch), self.artifacts.max_bytes
                )
                size = await in_thread(folder_bytes, folder, ARTIFACTS_DIR)
                kept = await within(allowed_seconds(size), "the artifacts", lambda: self.artifacts.keep(folder))
            if kept.files:
                log.info("Trial %s: kept %d artifact(s)", handle.get("trial_id"), len(kept.files))
            if kept.refused:  # said on the trial's page, the rest kept
                note = f"artifacts not kept: {'; '.join(kept.refused[:3])}"
                more = len(kept.refused) - 3
                self.notes.append((note + (f"; and {more} more" if more > 0 else ""))[:500])
                log.warning("Trial %s: %s", handle.get("trial_id"), note)
        except Exception as exc:
            note = f"artifacts not kept: {exc}"
            log.warning("Trial %s: %s", handle.get("trial_id"), note)
            self.notes.append(note[:500])

    async def restart(
        self, handle: TrialHandle, update: TrialUpdate, experiment_deadline: float | None
    ) -> TrialHandle | None:
        """The new job's handle if the trial starts again (see module), else None, with the
        reason in ``notes``."""
        record = await in_thread(self.store.trial, self.storage_id)
        if record.finished:
            return None
        reached = handle.get("attempt", 0)
        planned = next((r for r in record.restarts if r.attempt == reached + 1), None)
        if planned is None:
            verdict = restart_verdict(
                fault=self.platform.ended_by_fault(update),
                restarts_done=len(record.restarts),
                restarts_allowed=self.config.restarts,
                restart_on_failure=self.config.restart_on_failure,
                past_deadline=experiment_deadline is not None and time.time() > experiment_deadline,
            )
            if not verdict.restart:
                self.notes.append(verdict.why)
                return None
            step = await in_thread(self.checkpoints.last)
            reason = f"{verdict.why}: {update.message or update.status.value}"[:500]
            planned = Restart(reached + 1, step, time.time(), reason)
            record = await in_thread(self.store.add_restart, self.storage_id, planned)
            if record.finished:  # stopped meanwhile: nothing to start
                return None
        resume = None
        if planned.step is not None:
            step = planned.step
            resume = Resume(step, lambda into: self.checkpoints.fetch(step, into))
        elif record.lineage is not None and record.lineage.loaded_step is not None:
            # nothing of its own yet: a PBT trial starts again from its parent's checkpoint
            found = parent_checkpoint(self.experiment, record.lineage, None, record.lineage.loaded_step, self.root)
            resume = found[1] if found is not None else None
        spec = self.experiment.trial_spec(
            record.trial_index,
            record.number,
            record.parameters,
            record.service_index or 0,
            record.parameter_source,
            inputs=self._inputs(),
        )
        new = self.platform.describe(await self.platform.restart(handle, spec, planned.attempt, resume))
        log.info(
            "Trial %s: restarted (attempt %d) from %s",
            handle.get("trial_id"),
            planned.attempt,
            f"checkpoint {planned.step}" if planned.step is not None else "scratch",
        )
        record = await in_thread(self.store.add_restart, self.storage_id, planned, new)
        if record.finished:  # stopped while it was starting again: its stop never saw this job
            status = record.status if record.status in CANCEL_STATUSES else TrialStatus.USER_CANCELED
            noted = await job_stops.note(
                self.store, self.storage_id, status, record.message or "stopped while it was restarting"
            )
            await job_stops.stop_noted(self.platform, self.store, new, self.storage_id, noted)
        return new

    def _inputs(self) -> Any:
        if not self.run_id:
            return None
        return self.experiment.window(self.store, self.run_id).inputs


def parent_checkpoint(
    experiment: Experiment,
    lineage: Lineage,
    connections: Connections | None,
    step: int | None = None,
    root: StoragePath | None = None,
) -> tuple[int, Resume] | None:
    """A PBT trial's parent's last kept checkpoint (or the one of ``step``), as the step and the
    Resume its launch fetches; None where the parent kept none. The trial's own results are
    numbered from 0: it is a new run from the parent's weights, not the parent going on."""
    checkpoints = experiment.config.checkpoints
    if checkpoints is None or lineage.parent_trial_id is None:
        return None
    root = root if root is not None else artifact_root(checkpoints, experiment.workdir, connections)
    kept = TrialCheckpoints(root, experiment.experiment_id, lineage.parent_trial_id)
    found = kept.last() if step is None else step
    if found is None:
        return None
    return found, Resume(0, lambda into: kept.fetch(found, into))


def trial_keeping(
    experiment: Experiment,
    platform: TrainingPlatform[Any],
    store: ExperimentStore,
    storage_id: int,
    trial_id: str,
    connections: Connections | None,
    run_id: str = "",
) -> TrialKeeping | None:
    """Keeping for this trial where its experiment keeps checkpoints, else None."""
    checkpoints = experiment.config.checkpoints
    if checkpoints is None:
        return None
    root = artifact_root(checkpoints, experiment.workdir, connections)
    kept = TrialCheckpoints(root, experiment.experiment_id, trial_id, checkpoints.max_checkpoint_bytes)
    artifacts = TrialArtifacts(root, experiment.experiment_id, trial_id, checkpoints.max_artifacts_bytes)
    return TrialKeeping(experiment, platform, store, storage_id, kept, artifacts, run_id)

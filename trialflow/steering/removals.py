"""Removing an ended experiment's checkpoints and artifacts from its artifact store: what NNI
users did by deleting an experiment's folder, here an action with who asked in the history.

Only once every run of the experiment is over (a running trial's next checkpoint, or a PBT
child's parent, would find nothing): the opposite of the other actions, which act on running
experiments only. The store's root is opened by the caller (the Airflow layer's connection,
trialflow.hooks.artifact_store), since only it can reach a URL store.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from trialflow.checkpoints.keeper import remove_experiment_files
from trialflow.config.checkpoints import ARTIFACT_STORE_ATTR, ArtifactStore
from trialflow.steering.base import ActionRefused, NotRunning, UnknownTarget, check_running, record_action

if TYPE_CHECKING:
    from trialflow.checkpoints.keeper import StoragePath
    from trialflow.store.experiment_store import ExperimentStore


@dataclass(frozen=True)
class Removed:
    """What a removal took: how many files, from which store."""

    files: int
    url: str


def remove_artifacts(
    store: ExperimentStore, experiment_id: str, by: str, open_root: Callable[[ArtifactStore], StoragePath]
) -> Removed:
    """Delete everything the experiment kept in its artifact store (every trial's checkpoints
    and artifacts), and say so in its history. ActionRefused while a run goes on, for an
    experiment that keeps none, or one that does not exist; nothing changed then."""
    if not store.experiment_exists(experiment_id):
        raise UnknownTarget(f"no experiment {experiment_id!r}: nothing was removed")
    where = ArtifactStore.from_attr(store.experiment_attr(experiment_id, ARTIFACT_STORE_ATTR))
    if where is None:
        raise ActionRefused(f"experiment {experiment_id!r} keeps no checkpoints or artifacts: nothing was removed")
    try:
        check_running(store, experiment_id)
    except NotRunning:
        pass  # over: its files may go
    else:
        raise ActionRefused(
            f"experiment {experiment_id!r} is still running (a trial's next checkpoint, or a PBT child's "
            "parent, would be gone): stop it first; nothing was removed"
        )
    files = remove_experiment_files(open_root(where), experiment_id)
    record_action(store, experiment_id, by, "remove artifacts", f"{files} file(s) from {where.url}")
    return Removed(files, where.url)

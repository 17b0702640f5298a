"""A trial's artifacts in the artifact store: what it wrote in its ``artifacts`` folder (a
trained model, a plot), copied out when it ends, listed with sizes on its page, read back by
name for a download or a downstream DAG. Layout, beside its checkpoints::

    <store>/<experiment id>/<trial id>/artifacts/<the trial's files>
                                       artifacts.manifest.json

The manifest is written last and is the list: a name not in it is no artifact, so a reader's
path never leaves the trial's prefix (a name is checked again before it is joined). No Airflow.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from trialflow.checkpoints.keeper import (
    DEFAULT_MAX_BYTES,
    MANIFEST_SUFFIX,
    CheckpointError,
    KeptFile,
    KeptFolder,
    StoragePath,
    keep_folder,
    read_manifest,
)
from trialflow.trial.wire import ARTIFACTS_DIR


class UnknownArtifact(LookupError):
    """A name the trial's artifacts do not list."""


@dataclass(frozen=True)
class TrialArtifacts:
    """One trial's artifacts in the store (``root``: the store's path; ``max_bytes``: what its
    artifacts may hold together)."""

    root: StoragePath
    experiment_id: str
    trial_id: str
    max_bytes: int = DEFAULT_MAX_BYTES

    @property
    def trial_prefix(self) -> StoragePath:
        return self.root / self.experiment_id / self.trial_id

    @property
    def prefix(self) -> StoragePath:
        return self.trial_prefix / ARTIFACTS_DIR

    @property
    def manifest(self) -> StoragePath:
        return self.trial_prefix / f"{ARTIFACTS_DIR}{MANIFEST_SUFFIX}"

    def keep(self, trial_folder: str | os.PathLike[str]) -> KeptFolder:
        """Copy the trial's ``artifacts`` folder into the store (nothing when it has none; a
        later keep of the same trial, after a restart, replaces the list). Each file is its own:
        a link, a FIFO or one past ``max_bytes`` is left out and said in ``refused``, the rest
        kept (one bad file dropped every artifact of the trial)."""
        if not os.path.isdir(os.path.join(trial_folder, ARTIFACTS_DIR)):
            return KeptFolder([], [])
        return keep_folder(
            trial_folder,
            ARTIFACTS_DIR,
            self.prefix,
            self.manifest,
            f"the artifacts of trial {self.trial_id}",
            {},
            self.max_bytes,
            each_file=True,
        )

    def listed(self) -> list[KeptFile]:
        """The artifacts kept, by name (none: the trial kept none, or has not ended)."""
        try:
            return sorted(read_manifest(self.manifest, f"the artifacts of trial {self.trial_id}"), key=lambda f: f.name)
        except FileNotFoundError:
            return []

    def path(self, name: str) -> StoragePath:
        """The store's path of artifact ``name``, only if the manifest lists it."""
        for kept in self.listed():
            if kept.name == name:
                path = self.prefix
                for part in kept.name.split("/"):  # read_manifest refused "..", "" and "/"
                    path = path / part
                return path
        raise UnknownArtifact(f"trial {self.trial_id} has no artifact {name[:200]!r}")


__all__ = ["CheckpointError", "TrialArtifacts", "UnknownArtifact"]

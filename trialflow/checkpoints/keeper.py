"""A trial's checkpoints in the artifact store: copied out of the trial's folder, listed,
fetched back for a restart, and deleted by the retention rule.

The store is a path with pathlib's API: Airflow's ``ObjectStoragePath`` (``s3://``, ``gs://``,
``abfs://``... with its connection; the Airflow layer builds it) or a plain ``pathlib.Path``
(the experiment's own folder). Its layout, one prefix per trial::

    <store>/<experiment id>/<trial id>/checkpoints/000000012/<the trial's files>
                                                   000000012.manifest.json

A checkpoint is its files and then its manifest (every file's name, size and SHA-256), written
last: a copy cut short (the worker killed mid-upload) has no manifest and is no checkpoint,
and a fetch checks each file against it, so a restart never loads half a model. Files are read
from the trial's folder without following a symlink (trialflow.trial.folder): a trial cannot
make trialflow upload a file outside its folder. No Airflow here.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol

from trialflow.checkpoints.retention import Checkpoint, Retention, retain
from trialflow.trial.folder import files_in_folder, open_in_folder, stays_below
from trialflow.trial.wire import checkpoint_folder

#: Bytes per read and write: a model of gigabytes goes through in bounded memory.
CHUNK = 1024 * 1024
MANIFEST_SUFFIX = ".manifest.json"
#: Bounds on a manifest read back from the store (another writer may have put anything there).
MAX_MANIFEST_BYTES = 4 * 1024 * 1024
#: What one checkpoint, and one trial's artifacts together, may hold by default (apparent size:
#: a sparse file counts as large as it says it is): ``maxCheckpointSize`` and
#: ``maxArtifactsSize`` beside ``keepLast``. A trial that truncated a 2 GiB sparse file into its
#: artifacts put 2.1 GB of real disk in the store; ``truncate -s 1T`` would have filled it.
DEFAULT_MAX_BYTES = 4 * 1024**3
_STEP_NAME = re.compile(r"^(\d{9})" + re.escape(MANIFEST_SUFFIX) + "$")


class StoragePath(Protocol):
    """What the keeper uses of a path: pathlib's and ObjectStoragePath's common API."""

    @property
    def name(self) -> str: ...
    @property
    def parent(self) -> StoragePath: ...
    def __truediv__(self, key: str) -> StoragePath: ...
    def open(self, mode: str) -> Any: ...  # a binary file object (pathlib's and fsspec's differ in type)
    def exists(self) -> bool: ...
    def iterdir(self) -> Iterator[StoragePath]: ...
    def mkdir(self, *, parents: bool = ..., exist_ok: bool = ...) -> None: ...
    def unlink(self, *, missing_ok: bool = ...) -> None: ...
    def is_dir(self) -> bool: ...
    def rmdir(self) -> None: ...


class CheckpointError(Exception):
    """A checkpoint that cannot be kept or fetched whole (the message says which and why)."""


@dataclass(frozen=True)
class KeptFile:
    name: str
    size: int
    sha256: str


@dataclass(frozen=True)
class KeptFolder:
    """What keep_folder copied, and what it left out and why (a trial's artifacts keep what is
    within their bounds; a checkpoint is kept whole or refused, so it leaves nothing out)."""

    files: list[KeptFile]
    refused: list[str]


@dataclass(frozen=True)
class TrialCheckpoints:
    """One trial's checkpoints in the store (``root``: the store's path; ``max_bytes``: what one
    checkpoint may hold)."""

    root: StoragePath
    experiment_id: str
    trial_id: str
    max_bytes: int = DEFAULT_MAX_BYTES

    @property
    def prefix(self) -> StoragePath:
        return self.root / self.experiment_id / self.trial_id / "checkpoints"

    def keep(self, trial_folder: str | os.PathLike[str], step: int, relative: str | None = None) -> list[KeptFile]:
        """Copy the trial's checkpoint of ``step`` (``<trial folder>/checkpoints/<step>``, or the
        folder ``relative`` names: NNI PBT's save folder) into the store, its manifest last.
        CheckpointError if the folder holds a symlink, a FIFO or more than the listing bounds
        (nothing of it is then a checkpoint)."""
        name = _step_name(step)
        relative = relative or checkpoint_folder(step)
        return keep_folder(
            trial_folder,
            relative,
            self.prefix / name,
            self.prefix / f"{name}{MANIFEST_SUFFIX}",
            f"checkpoint {step} of trial {self.trial_id} ({relative})",
            {"step": step},
            self.max_bytes,
        ).files

    def steps(self) -> list[int]:
        """The steps kept whole (those with a manifest), oldest first."""
        if not self.prefix.exists():
            return []
        found = []
        for entry in self.prefix.iterdir():
            matched = _STEP_NAME.match(entry.name)
            if matched:
                found.append(int(matched.group(1)))
        return sorted(found)

    def last(self) -> int | None:
        steps = self.steps()
        return steps[-1] if steps else None

    def fetch(self, step: int, into: str | os.PathLike[str]) -> Path:
        """Download the checkpoint of ``step`` into the new folder ``into`` and check every file
        against its manifest (CheckpointError naming the file that differs or is missing)."""
        destination = Path(into)
        try:
            destination.mkdir(parents=True)
        except FileExistsError:
            raise CheckpointError(f"checkpoint {step} of trial {self.trial_id}: {destination} exists already") from None
        for kept in self._manifest(step):
            path = destination / kept.name
            path.parent.mkdir(parents=True, exist_ok=True)
            digest = hashlib.sha256()
            size = 0
            with (self.prefix / _step_name(step) / kept.name).open("rb") as source, path.open("wb") as out:
                while chunk := source.read(CHUNK):
                    digest.update(chunk)
                    size += len(chunk)
                    out.write(chunk)
            if size != kept.size or digest.hexdigest() != kept.sha256:
                raise CheckpointError(
                    f"checkpoint {step} of trial {self.trial_id}: {kept.name} is not the file that was kept "
                    f"({size} bytes, expected {kept.size})"
                )
        return destination

    def delete(self, step: int) -> None:
        """Remove a checkpoint, its manifest first (from then on it is no checkpoint)."""
        (self.prefix / f"{_step_name(step)}{MANIFEST_SUFFIX}").unlink(missing_ok=True)
        _remove_tree(self.prefix / _step_name(step))

    def apply(self, retention: Retention) -> None:
        for gone in retention.delete:
            self.delete(gone.step)

    def prune(
        self, metrics: dict[int, float], keep_last: int, keep_best: int, mode: str, pinned: frozenset[int] = frozenset()
    ) -> Retention:
        """Apply the retention rule to the kept steps; a checkpoint's result is the intermediate
        result reported just before it (step n follows results 0..n-1)."""
        checkpoints = [Checkpoint(step, metrics.get(step - 1)) for step in self.steps()]
        retention = retain(checkpoints, keep_last, keep_best, "minimize" if mode == "minimize" else "maximize", pinned)
        self.apply(retention)
        return retention

    def _manifest(self, step: int) -> list[KeptFile]:
        path = self.prefix / f"{_step_name(step)}{MANIFEST_SUFFIX}"
        try:
            return read_manifest(path, f"checkpoint {step} of trial {self.trial_id}")
        except FileNotFoundError:
            raise CheckpointError(f"trial {self.trial_id} has no checkpoint {step} in the store") from None


def keep_folder(
    trial_folder: str | os.PathLike[str],
    relative: str,
    target: StoragePath,
    manifest: StoragePath,
    which: str,
    facts: dict[str, Any],
    max_bytes: int,
    each_file: bool = False,
) -> KeptFolder:
    """Copy the trial's folder ``relative`` to ``target`` and write ``manifest`` (``facts`` and
    every file's name, size and SHA-256) last; files are read without following a symlink.

    Whole (a checkpoint): a symlink, a FIFO, a listing past its bounds or more than
    ``max_bytes`` in all is a CheckpointError naming ``which``, before anything is copied.
    ``each_file`` (a trial's artifacts): such a file is left out, said in ``refused``, and the
    others kept, in name order, while they fit in ``max_bytes``. Sizes are the files' own
    (apparent: a sparse file is as large as it says), and no file is copied past the size it was
    listed with, so one still growing cannot take more than was counted."""
    from trialflow.trial.folder import TrialFileRefused

    refused: list[str] = []
    try:
        listed = files_in_folder(trial_folder, relative, refused if each_file else None)
    except (TrialFileRefused, FileNotFoundError) as exc:
        raise CheckpointError(f"{which}: {exc}") from None
    total = sum(size for _, size in listed)
    if not each_file and total > max_bytes:
        raise CheckpointError(f"{which}: {_size(total)} in all, over its bound of {_size(max_bytes)}: not kept")
    kept: list[KeptFile] = []
    room = max_bytes
    for name, size in listed:
        if size > room:
            refused.append(f"{relative}/{name} ({_size(size)}) is past the {_size(max_bytes)} bound: not kept")
            continue
        try:
            fd = open_in_folder(trial_folder, f"{relative}/{name}")
        except (TrialFileRefused, FileNotFoundError) as exc:
            if not each_file:
                raise CheckpointError(f"{which}: {exc}") from None
            refused.append(str(exc))
            continue
        with os.fdopen(fd, "rb") as source:
            copied = _copy(source, target, name, size)
        if copied is None:
            if not each_file:
                raise CheckpointError(f"{which}: {relative}/{name} grew past {_size(size)} while it was copied")
            refused.append(f"{relative}/{name} grew past {_size(size)} while it was copied: not kept")
            continue
        kept.append(copied)
        room -= copied.size
    manifest.parent.mkdir(parents=True, exist_ok=True)
    with manifest.open("wb") as out:
        out.write(json.dumps({**facts, "files": [f.__dict__ for f in kept]}, sort_keys=True).encode())
    return KeptFolder(kept, refused)


def _size(count: int) -> str:
    """Bytes in the largest 1024-based unit that keeps one decimal."""
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count} bytes"


def read_manifest(path: StoragePath, which: str) -> list[KeptFile]:
    """The files a manifest lists, each name checked to stay below its folder (another writer
    may have put anything in the store). FileNotFoundError where there is none."""
    with path.open("rb") as fh:
        raw = fh.read(MAX_MANIFEST_BYTES + 1)
    if len(raw) > MAX_MANIFEST_BYTES:
        raise CheckpointError(f"{which}: its manifest is over {MAX_MANIFEST_BYTES} bytes")
    try:
        data = json.loads(raw)
        files = [KeptFile(str(f["name"]), int(f["size"]), str(f["sha256"])) for f in data["files"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"{which}: its manifest is unreadable ({exc})") from None
    for kept in files:
        if not stays_below(kept.name):
            raise CheckpointError(f"{which}: {kept.name[:200]!r} leads outside it")
    return files


def _step_name(step: int) -> str:
    return checkpoint_folder(step).rsplit("/", 1)[1]


def _copy(source: IO[bytes], target: StoragePath, name: str, limit: int) -> KeptFile | None:
    """The file copied, or None (and what was written removed) when it holds more than
    ``limit`` bytes."""
    path = target
    for part in name.split("/"):
        path = path / part
    path.parent.mkdir(parents=True, exist_ok=True)  # a no-op where folders are only prefixes
    digest = hashlib.sha256()
    size = 0
    with path.open("wb") as out:
        while chunk := source.read(min(CHUNK, limit - size + 1)):
            if size + len(chunk) > limit:
                break
            digest.update(chunk)
            size += len(chunk)
            out.write(chunk)
        else:
            return KeptFile(name, size, digest.hexdigest())
    path.unlink(missing_ok=True)
    return None


def _remove_tree(path: StoragePath) -> int:
    """Every file below ``path``, then its folders where the store has them (an object store's
    folders are only prefixes: they go with their last file); how many files went."""
    if not path.exists():
        return 0
    removed = 0
    for entry in list(path.iterdir()):
        if entry.is_dir():
            removed += _remove_tree(entry)
        else:
            entry.unlink(missing_ok=True)
            removed += 1
    try:
        path.rmdir()
    except OSError:
        pass  # an object store without folders, or one already gone
    return removed


def remove_experiment_files(root: StoragePath, experiment_id: str) -> int:
    """Every checkpoint and artifact of an experiment (its prefix below the store's root);
    how many files went. The id is checked to be one name, so nothing beside it is reached."""
    if not experiment_id or not stays_below(experiment_id) or "/" in experiment_id:
        raise CheckpointError(f"experiment id {experiment_id[:80]!r} is not one name")
    return _remove_tree(root / experiment_id)

"""A trial's artifacts kept in the store and read back by name only: on a plain folder, through
ObjectStoragePath and over HTTP to Azurite. A name the manifest does not list is no artifact,
a manifest naming a path outside is refused, a link in the folder is never followed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trialflow.checkpoints.artifacts import TrialArtifacts, UnknownArtifact
from trialflow.checkpoints.keeper import CheckpointError


def _trial(tmp_path: Path, files: dict[str, bytes]) -> Path:
    folder = tmp_path / "trial"
    for name, data in files.items():
        path = folder / "artifacts" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    folder.mkdir(exist_ok=True)
    return folder


def test_artifacts_are_kept_listed_with_sizes_and_read_back_by_name(tmp_path, root):
    folder = _trial(tmp_path, {"model.pt": b"w" * 5000, "plots/loss.svg": b"<svg/>"})
    artifacts = TrialArtifacts(root, "exp1", "exp1-0002")
    assert artifacts.listed() == []  # nothing before the trial ends
    artifacts.keep(folder)
    assert [(f.name, f.size) for f in artifacts.listed()] == [("model.pt", 5000), ("plots/loss.svg", 6)]
    with artifacts.path("plots/loss.svg").open("rb") as fh:
        assert fh.read() == b"<svg/>"
    for name in ("nope", "../exp1-0001/artifacts/model.pt", "/etc/passwd", "plots", ""):
        with pytest.raises(UnknownArtifact):
            artifacts.path(name)


def test_a_trial_without_an_artifacts_folder_keeps_none(tmp_path, root):
    (tmp_path / "trial").mkdir()
    assert TrialArtifacts(root, "exp1", "t").keep(tmp_path / "trial") == []
    assert TrialArtifacts(root, "exp1", "t").listed() == []


def test_a_link_in_the_folder_is_refused_and_a_manifest_leading_outside_is_no_list(tmp_path, root):
    folder = _trial(tmp_path, {"ok.txt": b"1"})
    (folder / "artifacts" / "secret").symlink_to("/etc/hostname")
    with pytest.raises(CheckpointError, match="the artifacts of trial t"):
        TrialArtifacts(root, "exp1", "t").keep(folder)
    artifacts = TrialArtifacts(root, "exp1", "t2")
    artifacts.keep(_trial(tmp_path / "b", {"a": b"1"}))
    with artifacts.manifest.open("wb") as out:  # another writer put this there
        out.write(json.dumps({"files": [{"name": "../../other/secret", "size": 1, "sha256": "x"}]}).encode())
    with pytest.raises(CheckpointError, match="leads outside"):
        artifacts.listed()

"""A trial's artifacts kept in the store and read back by name only: on a plain folder, through
ObjectStoragePath and over HTTP to Azurite. A name the manifest does not list is no artifact,
a manifest naming a path outside is refused, a link in the folder is never followed."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from trialflow.checkpoints.artifacts import TrialArtifacts, UnknownArtifact
from trialflow.checkpoints.keeper import CheckpointError, KeptFolder, TrialCheckpoints


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
    assert TrialArtifacts(root, "exp1", "t").keep(tmp_path / "trial") == KeptFolder([], [])
    assert TrialArtifacts(root, "exp1", "t").listed() == []


def test_a_link_in_the_folder_is_left_out_and_a_manifest_leading_outside_is_no_list(tmp_path, root):
    folder = _trial(tmp_path, {"ok.txt": b"1"})
    (folder / "artifacts" / "secret").symlink_to("/etc/hostname")
    os.mkfifo(folder / "artifacts" / "pipe")
    linked = TrialArtifacts(root, "exp1", "t")
    kept = linked.keep(folder)  # issue 64, 5: one bad file dropped every artifact of the trial
    assert [f.name for f in kept.files] == ["ok.txt"] and [f.name for f in linked.listed()] == ["ok.txt"]
    assert kept.refused == [
        "artifacts/pipe is a symlink or not a regular file: not read",
        "artifacts/secret is a symlink or not a regular file: not read",
    ]
    artifacts = TrialArtifacts(root, "exp1", "t2")
    artifacts.keep(_trial(tmp_path / "b", {"a": b"1"}))
    with artifacts.manifest.open("wb") as out:  # another writer put this there
        out.write(json.dumps({"files": [{"name": "../../other/secret", "size": 1, "sha256": "x"}]}).encode())
    with pytest.raises(CheckpointError, match="leads outside"):
        artifacts.listed()


def test_artifacts_past_their_bound_are_left_out_and_the_rest_kept(tmp_path, root):
    """Issue 64, 5: a 2 GiB sparse file put 2.1 GB of real disk in the store; ``truncate -s 1T``
    would fill it. Files past ``maxArtifactsSize`` (apparent sizes, together) are left out."""
    folder = _trial(tmp_path, {"a_small.txt": b"s" * 100, "c_model.pt": b"m" * 600})
    with open(folder / "artifacts" / "b_sparse.bin", "wb") as fh:
        fh.truncate(1024**4)  # 1 TiB that takes no disk
    artifacts = TrialArtifacts(root, "exp1", "big", max_bytes=1000)
    kept = artifacts.keep(folder)
    assert [(f.name, f.size) for f in artifacts.listed()] == [("a_small.txt", 100), ("c_model.pt", 600)]
    assert kept.refused == ["artifacts/b_sparse.bin (1024.0 GiB) is past the 1000 bytes bound: not kept"]
    tight = TrialArtifacts(root, "exp1", "tight", max_bytes=650).keep(folder)
    assert [f.name for f in tight.files] == ["a_small.txt"] and len(tight.refused) == 2  # 100 + 600 > 650


def test_a_checkpoint_past_its_bound_is_not_kept_at_all(tmp_path, root):
    from trialflow.trial.wire import checkpoint_folder

    folder = tmp_path / "trial"
    (folder / checkpoint_folder(3)).mkdir(parents=True)
    (folder / checkpoint_folder(3) / "w.bin").write_bytes(b"w" * 300)
    (folder / checkpoint_folder(3) / "x.bin").write_bytes(b"x" * 300)
    bounded = TrialCheckpoints(root, "exp1", "t", max_bytes=500)
    with pytest.raises(CheckpointError, match=r"checkpoint 3 of trial t .*: 600 bytes in all, over its bound of 500"):
        bounded.keep(folder, 3)
    assert bounded.steps() == []
    assert [f.size for f in TrialCheckpoints(root, "exp1", "t", max_bytes=600).keep(folder, 3)] == [300, 300]


def test_a_file_that_grows_while_it_is_copied_takes_no_more_than_was_counted(tmp_path):
    from trialflow.checkpoints.keeper import _copy

    source = tmp_path / "growing"
    source.write_bytes(b"g" * 10)
    with open(source, "rb") as fh:
        assert _copy(fh, tmp_path / "out", "f", 9) is None
    assert not (tmp_path / "out" / "f").exists()
    with open(source, "rb") as fh:
        copied = _copy(fh, tmp_path / "out", "f", 10)
    assert copied is not None and copied.size == 10

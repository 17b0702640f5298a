"""A trial's checkpoints kept in a store and fetched back whole: on a plain folder and through
Airflow's ObjectStoragePath, over ``file://`` and over HTTP to an object store (Azurite, through
the Microsoft Azure provider's ``abfs://``). A
checkpoint without its manifest is none, a file changed in the store is named on fetch, and a
trial cannot make trialflow copy a file outside its folder."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from trialflow.checkpoints.keeper import MANIFEST_SUFFIX, CheckpointError, TrialCheckpoints


def _trial_folder(tmp_path: Path, steps: dict[int, dict[str, bytes]]) -> Path:
    folder = tmp_path / "trial"
    for step, files in steps.items():
        for name, data in files.items():
            path = folder / "checkpoints" / f"{step:09d}" / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
    return folder


def test_a_kept_checkpoint_comes_back_byte_for_byte(tmp_path, root):
    model = os.urandom(3 * 1024 * 1024 + 17)  # more than one chunk
    folder = _trial_folder(tmp_path, {4: {"model.pt": model, "opt/state.json": b'{"lr": 0.1}'}})
    kept = TrialCheckpoints(root, "exp1", "exp1-0003")
    files = kept.keep(folder, 4)
    assert [(f.name, f.size) for f in files] == [("model.pt", len(model)), ("opt/state.json", 11)]
    assert kept.steps() == [4] and kept.last() == 4
    back = kept.fetch(4, tmp_path / "restart")
    assert (back / "model.pt").read_bytes() == model
    assert json.loads((back / "opt" / "state.json").read_text()) == {"lr": 0.1}


def test_a_copy_cut_short_has_no_manifest_and_is_no_checkpoint(tmp_path, root):
    folder = _trial_folder(tmp_path, {1: {"a": b"1"}, 2: {"a": b"2"}})
    kept = TrialCheckpoints(root, "exp1", "t1")
    kept.keep(folder, 1)
    kept.keep(folder, 2)
    (kept.prefix / f"000000002{MANIFEST_SUFFIX}").unlink()  # as if the worker died before the manifest
    assert kept.steps() == [1] and kept.last() == 1
    with pytest.raises(CheckpointError, match="trial t1 has no checkpoint 2 in the store"):
        kept.fetch(2, tmp_path / "x")


def test_a_file_changed_in_the_store_is_named_on_fetch(tmp_path, root):
    folder = _trial_folder(tmp_path, {3: {"weights.bin": b"x" * 100}})
    kept = TrialCheckpoints(root, "exp1", "t1")
    kept.keep(folder, 3)
    with (kept.prefix / "000000003" / "weights.bin").open("wb") as out:
        out.write(b"y" * 100)
    with pytest.raises(CheckpointError, match="weights.bin is not the file that was kept"):
        kept.fetch(3, tmp_path / "x")


def test_retention_deletes_what_the_rule_lets_go_manifest_first(tmp_path, root):
    steps = {step: {"m": str(step).encode()} for step in range(1, 6)}
    folder = _trial_folder(tmp_path, steps)
    kept = TrialCheckpoints(root, "exp1", "t1")
    for step in steps:
        kept.keep(folder, step)
    # results 0..4 reported before steps 1..5: the best (0.9) was reported just before step 2
    retention = kept.prune({0: 0.1, 1: 0.9, 2: 0.3, 3: 0.2, 4: 0.4}, keep_last=2, keep_best=1, mode="maximize")
    assert [c.step for c in retention.keep] == [5, 4, 2]
    assert kept.steps() == [2, 4, 5]
    assert not (kept.prefix / "000000001").exists() and not (kept.prefix / "000000003").exists()


def test_a_symlink_or_fifo_in_a_checkpoint_is_refused_and_nothing_of_it_kept(tmp_path, root):
    secret = tmp_path / "secret"
    secret.write_text("root:x:0:0")
    folder = _trial_folder(tmp_path, {1: {"ok": b"1"}, 2: {"ok": b"2"}})
    (folder / "checkpoints" / "000000001" / "passwd").symlink_to(secret)
    os.mkfifo(folder / "checkpoints" / "000000002" / "pipe")
    kept = TrialCheckpoints(root, "exp1", "t1")
    for step in (1, 2):
        with pytest.raises(CheckpointError, match="is a symlink or not a regular file"):
            kept.keep(folder, step)
    assert kept.steps() == []
    (folder / "checkpoints" / "000000003").symlink_to(secret.parent)  # the step's folder itself
    with pytest.raises(CheckpointError, match="symlink"):
        kept.keep(folder, 3)


def test_a_manifest_that_leads_outside_the_checkpoint_is_refused(tmp_path, root):
    folder = _trial_folder(tmp_path, {1: {"a": b"1"}})
    kept = TrialCheckpoints(root, "exp1", "t1")
    kept.keep(folder, 1)
    with (kept.prefix / f"000000001{MANIFEST_SUFFIX}").open("wb") as out:
        out.write(json.dumps({"step": 1, "files": [{"name": "../../../etc/x", "size": 1, "sha256": "0"}]}).encode())
    with pytest.raises(CheckpointError, match="leads outside it"):
        kept.fetch(1, tmp_path / "x")
    assert not (tmp_path / "etc").exists()


def test_a_missing_checkpoint_folder_is_said(tmp_path, root):
    with pytest.raises(CheckpointError, match=r"checkpoint 7 of trial t1 \(checkpoints/000000007\)"):
        TrialCheckpoints(root, "exp1", "t1").keep(tmp_path, 7)


def test_a_fetch_into_a_folder_that_exists_is_refused_and_leaves_it_alone(tmp_path, root):
    folder = _trial_folder(tmp_path, {1: {"a": b"1"}})
    kept = TrialCheckpoints(root, "exp1", "t1")
    kept.keep(folder, 1)
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "mine").write_text("keep me")
    with pytest.raises(CheckpointError, match="exists already"):
        kept.fetch(1, tmp_path / "busy")
    assert [p.name for p in (tmp_path / "busy").iterdir()] == ["mine"]

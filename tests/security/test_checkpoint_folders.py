"""Hostile checkpoint folders: a trial's folder is its own, so a listing that walks it bounds
the files and the depth as they come, and never follows a symlink at any level."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from trialflow.trial import folder as folder_module
from trialflow.trial.folder import TrialFileRefused, files_in_folder


def test_files_past_the_bound_are_refused_while_listed(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(folder_module, "MAX_LISTED_FILES", 50)
    many = tmp_path / "checkpoints" / "000000001"
    many.mkdir(parents=True)
    for i in range(200):
        (many / f"f{i:03d}").write_bytes(b"")
    with pytest.raises(TrialFileRefused, match="holds more than 50 files"):
        files_in_folder(tmp_path, "checkpoints/000000001")


def test_folders_past_the_depth_are_refused(tmp_path: Path):
    deep = tmp_path / "checkpoints" / "000000001"
    path = deep
    for i in range(folder_module.MAX_LISTED_DEPTH + 2):
        path = path / f"d{i}"
    path.mkdir(parents=True)
    (path / "f").write_bytes(b"x")
    with pytest.raises(TrialFileRefused, match="folders deep"):
        files_in_folder(tmp_path, "checkpoints/000000001")


def test_a_symlinked_folder_at_any_level_is_refused_not_followed(tmp_path: Path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("s")
    top = tmp_path / "trial" / "checkpoints" / "000000001" / "sub"
    top.mkdir(parents=True)
    (top / "link").symlink_to(outside)
    with pytest.raises(TrialFileRefused, match="symlink"):
        files_in_folder(tmp_path / "trial", "checkpoints/000000001")
    os.rename(tmp_path / "trial" / "checkpoints", tmp_path / "real")
    (tmp_path / "trial" / "checkpoints").symlink_to(tmp_path / "real")  # a level above the step
    with pytest.raises(TrialFileRefused, match="symlink"):
        files_in_folder(tmp_path / "trial", "checkpoints/000000001")


@pytest.mark.parametrize("name", ["../x", "/etc", "", "a/../../b"])
def test_a_name_outside_the_folder_is_refused(tmp_path: Path, name):
    with pytest.raises(TrialFileRefused, match="is not a path inside the trial's folder"):
        files_in_folder(tmp_path, name)


def test_a_listing_gives_every_regular_file_with_its_size_sorted(tmp_path: Path):
    step = tmp_path / "checkpoints" / "000000002"
    (step / "b").mkdir(parents=True)
    (step / "b" / "y").write_bytes(b"12")
    (step / "a").write_bytes(b"1")
    assert files_in_folder(tmp_path, "checkpoints/000000002") == [("a", 1), ("b/y", 2)]

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


def _tar(path: Path, members: list) -> Path:
    import io
    import tarfile

    with tarfile.open(path, "w") as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def _member(name: str, kind: bytes = b"0", data: bytes | None = b"x", link: str = ""):
    import tarfile

    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    info.size = len(data) if data is not None and kind == tarfile.REGTYPE else 0
    return info, data if kind == tarfile.REGTYPE else None


@pytest.mark.parametrize(
    "hostile",
    [
        _member("../../escaped"),
        _member("checkpoints/000000001/out", b"2", None, "/etc/hostname"),  # absolute link
        _member("checkpoints/000000001/up", b"2", None, "../../../../etc/hostname"),  # climbing link
        _member("checkpoints/000000001/dev", b"3", None),  # a character device
        _member("checkpoints/000000001/hard", b"1", None, "/etc/hostname"),  # a hard link outside
    ],
    ids=["climb", "abs-link", "climbing-link", "device", "hard-link"],
)
def test_an_archive_a_remote_trial_made_cannot_write_outside_its_folder(tmp_path: Path, hostile):
    """What a remote machine sends back for a checkpoint or artifacts is the trial's own
    making: a member outside the folder, a link out or a device is refused, nothing written."""
    import tarfile

    from trialflow.platforms.remote.platform import extract_output

    archive = _tar(tmp_path / "a.tar", [_member("checkpoints/000000001/ok.bin"), hostile])
    with pytest.raises(tarfile.FilterError):
        extract_output(archive, tmp_path / "out")
    assert not (tmp_path / "escaped").exists() and not Path("/etc/escaped").exists()


def test_an_absolute_member_name_lands_inside_the_folder(tmp_path: Path):
    from trialflow.platforms.remote.platform import extract_output

    extract_output(_tar(tmp_path / "a.tar", [_member("/tmp/escaped-by-name")]), tmp_path / "out")
    assert (tmp_path / "out" / "tmp" / "escaped-by-name").read_bytes() == b"x"  # the data filter strips the /
    assert not Path("/tmp/escaped-by-name").exists()


def test_a_remote_archive_with_a_link_inside_is_extracted_and_then_refused_by_the_keeper(tmp_path: Path):
    """A link that stays inside passes the filter; the keeper refuses any link at all, so the
    checkpoint is not kept (its follower says why) and no file is read through it."""
    import tarfile

    from trialflow.checkpoints.keeper import CheckpointError, TrialCheckpoints
    from trialflow.platforms.remote.platform import extract_output

    archive = _tar(
        tmp_path / "a.tar",
        [
            _member("checkpoints/000000001/ok.bin"),
            _member("checkpoints/000000001/alias", tarfile.SYMTYPE, None, "ok.bin"),
        ],
    )
    extract_output(archive, tmp_path / "out")
    with pytest.raises(CheckpointError, match="checkpoint 1 of trial t"):
        TrialCheckpoints(tmp_path / "store", "e", "t").keep(tmp_path / "out", 1)
    assert not (tmp_path / "store" / "e" / "t" / "checkpoints" / "000000001.manifest.json").exists()


@pytest.mark.parametrize(
    ("name", "below"),
    [
        ("model.pt", True),
        ("plots/loss é.svg", True),
        ("a..b/c", True),
        ("", False),
        ("/etc/passwd", False),
        ("../x", False),
        ("a/../../x", False),
        ("a//b", False),
        ("./a", False),
        ("a/.", False),
        ("a/", False),
    ],
)
def test_a_name_from_another_writer_is_joined_only_when_it_stays_below(name: str, below: bool):
    from trialflow.trial.folder import stays_below

    assert stays_below(name) is below

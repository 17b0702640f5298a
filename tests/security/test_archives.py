"""Hostile code archives: the extractor that runs on remote machines and in pods must never
write outside its folder, whatever chain of links, names or member kinds an archive holds."""

from __future__ import annotations

import io
import os
import stat
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from trialflow.platforms.remote import staging_command
from trialflow.trial import packing, unpack


def _info(
    name: str, kind: bytes = tarfile.REGTYPE, link: str = "", data: bytes = b"", mode: int = 0o644
) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = kind, link, mode
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    return info, data


def _archive(path: Path, *members: tuple[tarfile.TarInfo, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if info.isfile() else None)
    return path


def sym(name: str, link: str) -> tuple[tarfile.TarInfo, bytes]:
    return _info(name, tarfile.SYMTYPE, link)


def hard(name: str, link: str) -> tuple[tarfile.TarInfo, bytes]:
    return _info(name, tarfile.LNKTYPE, link)


def file(name: str, data: bytes = b"x", mode: int = 0o644) -> tuple[tarfile.TarInfo, bytes]:
    return _info(name, data=data, mode=mode)


def folder(name: str) -> tuple[tarfile.TarInfo, bytes]:
    return _info(name, tarfile.DIRTYPE, mode=0o755)


@pytest.fixture
def box(tmp_path: Path) -> Path:
    """A folder with a victim file beside the extraction target, to see what leaks out."""
    (tmp_path / "victim.txt").write_text("original")
    (tmp_path / "stage").mkdir()
    return tmp_path


def _nothing_outside(box: Path, dest: Path) -> None:
    assert (box / "victim.txt").read_text() == "original"
    found = sorted(p.name for p in box.rglob("*") if "ESCAPED" in p.name or p.name == "pwned")
    assert not found, f"written outside the target folder: {found}"
    assert not dest.exists(), "a refused archive leaves no target folder behind"
    assert not list(dest.parent.glob(dest.name + ".partial-*")), "no half-written folder is left"


HOSTILE = {
    # the chain that got through the text-only check: p -> ., p/p/y -> ../.., p/p/y/ESCAPED
    "chain through a link to itself": [sym("p", "."), sym("p/p/y", "../.."), file("p/p/y/ESCAPED")],
    "file below a link to a folder": [folder("sub"), sym("s", "sub"), file("s/ESCAPED")],
    "link whose target is a link out": [sym("c", "."), sym("b", "c/.."), sym("a", "b")],
    "link through a later link": [sym("e", "d/.."), sym("d", ".")],
    "hard link through a link": [folder("sub"), file("sub/t"), sym("s", "sub"), hard("h", "s/t")],
    "hard link to a path outside": [hard("h", "../victim.txt")],
    "hard link to an absolute path": [hard("h", "/etc/passwd")],
    "hard link to a later file": [hard("h", "later"), file("later")],
    "hard link to a link": [sym("l", "ok"), file("ok"), hard("h", "l")],
    "a file replacing an earlier link": [sym("x", "."), file("x", b"pwned")],
    "a link replacing an earlier file": [file("x"), sym("x", "../victim.txt")],
    "a file named twice": [file("a", b"1"), file("./a", b"2")],
    "absolute name": [file("/tmp/ESCAPED")],
    "dot-dot name": [file("../ESCAPED")],
    "dot-dot inside a name": [file("a/../../ESCAPED")],
    "backslash dot-dot name": [file("..\\ESCAPED")],
    "absolute link": [sym("l", "/etc")],
    "dot-dot link": [sym("l", "../stage")],
    "character device": [_info("dev", tarfile.CHRTYPE)],
    "block device": [_info("blk", tarfile.BLKTYPE)],
    "fifo": [_info("fifo", tarfile.FIFOTYPE)],
    "file below a file": [file("f"), file("f/g")],
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_archives_are_refused_whole(box: Path, case: str):
    archive = _archive(box / "evil.tar.gz", file("ok.py"), *HOSTILE[case])
    dest = box / "stage" / "out"
    with pytest.raises(unpack.UnsafeArchive):
        unpack.safe_extract(str(archive), str(dest))
    _nothing_outside(box, dest)


@pytest.mark.parametrize(
    "case", ["chain through a link to itself", "hard link through a link", "link through a later link"]
)
def test_the_real_staging_command_refuses_them(box: Path, case: str):
    """What runs on a machine: the staging command, the extractor's source on stdin."""
    base = box / "stage" / "base"
    base.mkdir()
    archive = _archive(base / "upload.tar.gz", file("ok.py"), *HOSTILE[case])
    (base / "upload.tar.gz.py").write_text(Path(unpack.__file__).read_text())
    result = subprocess.run(
        ["bash", "-c", staging_command(str(base), "d" * 16, str(archive), sys.executable)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0 and "staged" not in result.stdout, result.stdout
    assert "refused archive member" in result.stderr
    assert not (base / ".code" / ("d" * 16)).exists()
    assert not archive.exists() and not (base / "upload.tar.gz.py").exists()  # a refused upload is not kept
    _nothing_outside(box, box / "stage" / "never")


def test_links_that_stay_inside_are_kept(tmp_path: Path):
    archive = _archive(
        tmp_path / "ok.tar.gz",
        folder("pkg"),
        file("pkg/mod.py", b"m"),
        sym("alias", "pkg/mod.py"),
        sym("pkg/up", "../alias"),
        sym("dirlink", "pkg"),
        hard("pkg/copy.py", "pkg/mod.py"),
    )
    dest = tmp_path / "out"
    unpack.safe_extract(str(archive), str(dest))
    assert (dest / "pkg/up").read_text() == "m"
    assert (dest / "dirlink" / "mod.py").read_text() == "m"
    assert os.stat(dest / "pkg/copy.py").st_ino == os.stat(dest / "pkg/mod.py").st_ino


def test_set_id_and_sticky_bits_are_dropped(tmp_path: Path):
    archive = _archive(
        tmp_path / "ok.tar.gz", file("suid", mode=0o4755), file("sgid", mode=0o2700), file("ro", mode=0o444)
    )
    dest = tmp_path / "out"
    unpack.safe_extract(str(archive), str(dest))
    modes = {name: stat.S_IMODE(os.stat(dest / name).st_mode) for name in ("suid", "sgid", "ro")}
    assert modes == {"suid": 0o755, "sgid": 0o700, "ro": 0o644}


def test_an_existing_folder_with_content_is_never_extracted_into(tmp_path: Path):
    dest = tmp_path / "out"
    dest.mkdir()
    (dest / "link").symlink_to(tmp_path)
    archive = _archive(tmp_path / "ok.tar.gz", file("link/ESCAPED"))
    with pytest.raises(unpack.UnsafeArchive, match="not an empty folder"):
        unpack.safe_extract(str(archive), str(dest))
    assert not (tmp_path / "ESCAPED").exists()


def test_archives_beyond_the_upload_limits_are_refused(tmp_path: Path, monkeypatch):
    assert (unpack.MAX_FILES, unpack.MAX_BYTES) == (packing.MAX_FILES, packing.MAX_BYTES)
    many = _archive(tmp_path / "many.tar.gz", *(file(f"f{i}") for i in range(unpack.MAX_FILES + 1)))
    with pytest.raises(unpack.UnsafeArchive, match="more than 2000 files"):
        unpack.safe_extract(str(many), str(tmp_path / "a"))
    monkeypatch.setattr(unpack, "MAX_BYTES", 1000)
    big = _archive(tmp_path / "big.tar.gz", file("a", b"x" * 600), file("b", b"x" * 600))
    with pytest.raises(unpack.UnsafeArchive, match="MB of files"):
        unpack.safe_extract(str(big), str(tmp_path / "b"))
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_a_corrupt_archive_is_a_clear_failure_of_the_program(tmp_path: Path):
    bad = tmp_path / "bad.tar.gz"
    bad.write_bytes(b"\x1f\x8b" + os.urandom(200))
    assert unpack.main(["unpack.py", str(bad), str(tmp_path / "out")]) == 4
    assert not (tmp_path / "out").exists()

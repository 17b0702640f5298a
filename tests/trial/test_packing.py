"""Code staging: .nniignore (nested too), NNI's limits, content hashes, hostile archives."""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from trialflow.trial import packing, unpack
from trialflow.trial.packing import CodeDirectoryError, collect_files, pack


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_nniignore_top_level_and_nested(tmp_path):
    root = _tree(
        tmp_path / "code",
        {
            "train.py": "x",
            ".nniignore": "data/\n*.ckpt\n!keep.ckpt\n",
            "data/big.bin": "x",
            "model.ckpt": "x",
            "keep.ckpt": "x",
            "lib/util.py": "x",
            "lib/.nniignore": "scratch*\n/local.txt\n",
            "lib/scratch1.py": "x",
            "lib/local.txt": "x",
            "lib/sub/local.txt": "x",
            "lib/sub/scratch2.py": "x",
        },
    )
    names = [p.as_posix() for p in collect_files(root)]
    assert names == [".nniignore", "keep.ckpt", "lib/.nniignore", "lib/sub/local.txt", "lib/util.py", "train.py"]


def test_too_many_files_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setattr(packing, "MAX_FILES", 5)
    root = _tree(tmp_path / "code", {f"runs/{i}.log": "x" for i in range(6)} | {"train.py": "x"})
    with pytest.raises(CodeDirectoryError, match=r"has 7 files to upload; the limit is 5 .*\.nniignore.*runs"):
        pack(root)


def test_too_many_bytes_names_the_largest_files(tmp_path, monkeypatch):
    monkeypatch.setattr(packing, "MAX_BYTES", 1000)
    root = _tree(tmp_path / "code", {"train.py": "x", "weights.bin": "w" * 2000})
    with pytest.raises(CodeDirectoryError, match=r"the largest files: weights.bin"):
        pack(root)


def test_the_digest_is_the_content(tmp_path):
    a = _tree(tmp_path / "a", {"train.py": "print(1)", "lib/u.py": "u"})
    b = _tree(tmp_path / "b", {"lib/u.py": "u", "train.py": "print(1)"})
    first, second = pack(a), pack(b)
    assert first.digest == second.digest and first.archive == second.archive
    (b / "train.py").write_text("print(2)")
    assert pack(b).digest != first.digest
    assert first.file_count == 2 and first.total_bytes == len("print(1)") + 1


def test_round_trip_through_the_remote_extractor_program(tmp_path):
    root = _tree(tmp_path / "code", {"train.py": "print(1)", "lib/u.py": "u"})
    (root / "link.py").symlink_to("train.py")
    archive = tmp_path / "code.tar.gz"
    archive.write_bytes(pack(root).archive)
    dest = tmp_path / "out"
    # exactly how a machine runs it: the module's source on stdin
    result = subprocess.run(
        [sys.executable, "-", str(archive), str(dest)],
        input=Path(unpack.__file__).read_text(),
        text=True,
        capture_output=True,
    )
    assert result.returncode == 0, result.stderr
    assert (dest / "lib/u.py").read_text() == "u"
    assert (dest / "link.py").is_symlink() and (dest / "link.py").read_text() == "print(1)"


def _hostile(tmp_path: Path, member: tarfile.TarInfo, data: bytes = b"") -> Path:
    path = tmp_path / "evil.tar"
    with tarfile.open(path, "w") as tar:
        good = tarfile.TarInfo("ok.py")
        good.size = 1
        tar.addfile(good, io.BytesIO(b"x"))
        member.size = len(data)
        tar.addfile(member, io.BytesIO(data) if data else None)
    return path


def _member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    return info


@pytest.mark.parametrize(
    "member, reason",
    [
        (_member("/etc/evil"), "absolute path"),
        (_member("../evil"), "path leaves the target folder"),
        (_member("a/../../evil"), "path leaves the target folder"),
        (_member("up", tarfile.SYMTYPE, "../../etc/passwd"), "link points outside the target folder"),
        (_member("abs", tarfile.SYMTYPE, "/etc/passwd"), "link to an absolute path"),
        (_member("hard", tarfile.LNKTYPE, "../outside"), "link points outside the target folder"),
        (_member("dev", tarfile.CHRTYPE), "not a regular file, folder or link"),
        (_member("fifo", tarfile.FIFOTYPE), "not a regular file, folder or link"),
    ],
)
def test_a_hostile_member_refuses_the_whole_archive(tmp_path, member, reason):
    archive = _hostile(tmp_path, member, b"evil" if member.isfile() else b"")
    dest = tmp_path / "out"
    with pytest.raises(unpack.UnsafeArchive, match=reason):
        unpack.safe_extract(str(archive), str(dest))
    assert not dest.exists(), "nothing is extracted, not even the good member"
    assert unpack.main(["unpack.py", str(archive), str(dest)]) == 3


def test_a_link_inside_the_folder_is_fine(tmp_path):
    archive = _hostile(tmp_path, _member("sub/alias", tarfile.SYMTYPE, "../ok.py"))
    unpack.safe_extract(str(archive), str(tmp_path / "out"))
    assert (tmp_path / "out/sub/alias").read_text() == "x"


def test_the_digest_does_not_depend_on_when_it_was_packed(tmp_path, monkeypatch):
    import time as time_module

    root = _tree(tmp_path / "code", {"train.py": "print(1)"})
    first = pack(root)
    monkeypatch.setattr(time_module, "time", lambda: 4_000_000_000.0)  # gzip's default header time
    assert pack(root).archive == first.archive


def test_a_known_folder_state_gives_its_digest_without_packing(tmp_path, monkeypatch):
    from trialflow.trial.packing import known_digest, remember_digest

    monkeypatch.setenv("TRIALFLOW_CACHE", str(tmp_path / "cache"))
    root = _tree(tmp_path / "code", {"train.py": "print(1)"})
    fp, digest = known_digest(root)
    assert digest is None
    packed = pack(root)
    remember_digest(fp, packed)
    assert known_digest(root) == (fp, packed.digest)
    (root / "train.py").write_text("print(22)")  # changed: another state, unknown
    assert known_digest(root)[1] is None


def test_a_deeper_nniignore_can_bring_back_what_a_parent_left_out(tmp_path):
    root = _tree(
        tmp_path / "code",
        {
            ".nniignore": "*.bin\nlogs/\n",
            "a.bin": "x",
            "models/.nniignore": "!*.bin\n",
            "models/w.bin": "x",
            "models/sub/v.bin": "x",
            "logs/.nniignore": "!*\n",
            "logs/run.txt": "x",
            "t.py": "x",
        },
    )
    names = [p.as_posix() for p in collect_files(root)]
    # gitignore: the deepest file decides; nothing returns from inside an ignored folder
    assert names == [".nniignore", "models/.nniignore", "models/sub/v.bin", "models/w.bin", "t.py"]


def test_links_travel_as_links_and_links_out_of_the_folder_are_refused(tmp_path):
    root = _tree(tmp_path / "code", {"lib/u.py": "u", "t.py": "x"})
    (root / "libs").symlink_to("lib")  # a folder link: it used to vanish silently
    (root / "alias.py").symlink_to("t.py")
    assert [p.as_posix() for p in collect_files(root)] == ["alias.py", "lib/u.py", "libs", "t.py"]
    archive = tmp_path / "c.tar.gz"
    archive.write_bytes(pack(root).archive)
    unpack.safe_extract(str(archive), str(tmp_path / "out"))
    assert (tmp_path / "out" / "libs" / "u.py").read_text() == "u"
    (tmp_path / "elsewhere").mkdir()
    (root / "data").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(CodeDirectoryError, match="data is a link to .*elsewhere, outside the folder"):
        collect_files(root)
    (root / ".nniignore").write_text("data\n")
    assert "data" not in [p.as_posix() for p in collect_files(root)]


def test_an_nniignore_that_leaves_out_everything_is_said(tmp_path):
    root = _tree(tmp_path / "code", {".nniignore": "*\n", "t.py": "x", "lib/u.py": "x"})
    with pytest.raises(CodeDirectoryError, match="leave out every file"):
        collect_files(root)


def test_validate_says_so_for_a_remote_experiment(tmp_path):
    from trialflow.config import ConfigError
    from trialflow.experiment import load_runnable_config

    root = _tree(tmp_path / "code", {".nniignore": "*\n", "t.py": "x"})
    config = tmp_path / "c.yml"
    config.write_text(
        f"searchSpace: {{x: {{_type: uniform, _value: [0, 1]}}}}\ntrialCommand: python3 t.py\n"
        f"trialCodeDirectory: {root}\ntrialConcurrency: 1\ntuner: {{name: Random}}\n"
        "trainingService: {platform: remote, machineList: [{host: h, user: u}]}\n"
    )
    with pytest.raises(ConfigError, match="trialCodeDirectory: .*leave out every file"):
        load_runnable_config(config)


def test_the_experiment_config_never_travels_with_the_code(tmp_path):
    root = _tree(tmp_path / "code", {"config.yml": "password: x", "t.py": "x", "sub/config.yml": "kept"})
    assert [p.as_posix() for p in collect_files(root, [root / "config.yml"])] == ["sub/config.yml", "t.py"]
    names = tarfile.open(fileobj=io.BytesIO(pack(root, [root / "config.yml"]).archive)).getnames()
    assert "config.yml" not in names and "t.py" in names

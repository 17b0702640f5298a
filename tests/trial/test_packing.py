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
    from trialflow.trial.packing import cached_digest, fingerprint, remember_digest

    monkeypatch.setenv("TRIALFLOW_CACHE", str(tmp_path / "cache"))
    root = _tree(tmp_path / "code", {"train.py": "print(1)"})
    fp = fingerprint(root, collect_files(root))
    assert cached_digest(fp) is None
    packed = pack(root)
    remember_digest(fp, packed.digest)
    assert cached_digest(fingerprint(root, collect_files(root))) == packed.digest
    (root / "train.py").write_text("print(22)")  # changed: another state, unknown
    assert fingerprint(root, collect_files(root)) != fp


def _stream(root: Path, compress: bool, stop_after: int | None = None) -> tuple[list[bytes], packing.ArchiveStream]:
    import asyncio
    import contextlib

    stream = packing.ArchiveStream(root, collect_files(root), compress)

    async def read() -> list[bytes]:
        chunks = []
        async with contextlib.aclosing(stream.chunks()) as source:
            async for chunk in source:
                chunks.append(chunk)
                if stop_after is not None and len(chunks) == stop_after:
                    break
        return chunks

    return asyncio.run(read()), stream


@pytest.mark.parametrize("compress", [True, False])
def test_a_streamed_archive_is_the_packed_archive_in_bounded_chunks(tmp_path, monkeypatch, compress):
    import gzip
    import os

    monkeypatch.setattr(packing, "CHUNK_BYTES", 64 * 1024)
    root = _tree(tmp_path / "code", {"train.py": "print(1)\n" * 5000, "lib/u.py": "u"})
    (root / "weights.bin").write_bytes(os.urandom(700 * 1024))  # one file of many chunks
    (root / "alias.py").symlink_to("train.py")
    chunks, stream = _stream(root, compress)
    packed = pack(root)
    assert stream.digest == packed.digest  # the digest names the content, compressed or not
    data = b"".join(chunks)
    raw = gzip.decompress(data) if compress else data
    assert raw == gzip.decompress(packed.archive)
    if compress:
        assert data == packed.archive
    # a tar record and a gzip block beyond the chunk size at most: nothing held whole
    assert len(chunks) > 10 and max(len(c) for c in chunks) < 64 * 1024 + 64 * 1024
    archive = tmp_path / "streamed.tar"
    archive.write_bytes(data)
    unpack.safe_extract(str(archive), str(tmp_path / "out"))
    assert (tmp_path / "out" / "weights.bin").read_bytes() == (root / "weights.bin").read_bytes()


def test_a_stream_read_again_gives_the_same_bytes_and_one_left_early_stops_its_writer(tmp_path, monkeypatch):
    import os
    import threading

    monkeypatch.setattr(packing, "CHUNK_BYTES", 16 * 1024)
    root = _tree(tmp_path / "code", {"train.py": "x"})
    (root / "data.bin").write_bytes(os.urandom(2 * 1024 * 1024))
    first, stream = _stream(root, False)
    assert b"".join(first) == b"".join(_stream(root, False)[0])  # a retried upload sends the same
    before = threading.active_count()
    partial, stream = _stream(root, False, stop_after=2)
    assert len(partial) == 2 and stream.digest is None
    deadline = __import__("time").monotonic() + 5
    while any(t.name == "trialflow-archive" for t in threading.enumerate()):
        assert __import__("time").monotonic() < deadline, "the writer thread outlived its reader"
    assert threading.active_count() <= before


def test_a_file_that_vanishes_while_streaming_is_raised_to_the_reader(tmp_path):
    root = _tree(tmp_path / "code", {"train.py": "x", "gone.py": "y"})
    stream = packing.ArchiveStream(root, collect_files(root), False)
    (root / "gone.py").unlink()
    import asyncio

    async def read() -> None:
        async for _ in stream.chunks():
            pass

    with pytest.raises(FileNotFoundError, match="gone.py"):
        asyncio.run(read())


def test_gzip_only_where_the_sample_shrinks(tmp_path):
    import os

    source = _tree(tmp_path / "src", {f"m{i}.py": f"def f{i}(x):\n    return x + {i}\n" * 200 for i in range(20)})
    assert packing.worth_compressing(source, collect_files(source))
    data = _tree(tmp_path / "data", {"train.py": "print(1)\n" * 100})
    (data / "model.pt").write_bytes(os.urandom(3 * 1024 * 1024))  # the bytes are the weights'
    assert not packing.worth_compressing(data, collect_files(data))
    empty = _tree(tmp_path / "empty", {"t.py": ""})
    assert packing.worth_compressing(empty, collect_files(empty))


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


def test_trialflows_own_folders_are_never_walked_or_staged(tmp_path, monkeypatch):
    """`trialflow run`'s home beside the config (``trialCodeDirectory: .``) holds the private
    Airflow's database and the live experiment store: never staged, nor opened (opening and
    closing a SQLite file the process has open drops its locks), at any depth."""
    import builtins

    from trialflow.experiment import default_home

    (tmp_path / "train.py").write_text("print(1)\n")
    home = default_home(tmp_path / "config.yml")
    assert home == tmp_path / packing.OWN_FOLDER
    for folder in (home, tmp_path / "sub" / packing.OWN_FOLDER):
        folder.mkdir(parents=True)
        (folder / "experiments.db").write_bytes(b"SQLite format 3\0")
    (tmp_path / "sub" / "model.py").write_text("x = 1\n")
    opened: list[str] = []
    real_open = builtins.open
    monkeypatch.setattr(builtins, "open", lambda f, *a, **k: (opened.append(str(f)), real_open(f, *a, **k))[1])
    files = collect_files(tmp_path)
    assert [f.as_posix() for f in files] == ["sub/model.py", "train.py"]
    assert not [name for name in opened if packing.OWN_FOLDER in name]
    names = tarfile.open(fileobj=io.BytesIO(pack(tmp_path).archive)).getnames()
    assert not [n for n in names if packing.OWN_FOLDER in n]


def test_the_sdk_files_alone_import_the_sdk_its_function_runner_and_nni(tmp_path):
    """What a machine without trialflow gets (SDK_FILES) is all ``trialflow.trial``, its
    function runner and the ``nni`` stand-in import: nothing of the package beside them."""
    import subprocess
    import sys
    from pathlib import Path

    from trialflow.trial import packing

    root = Path(packing.__file__).resolve().parents[2]
    for name in packing.SDK_FILES:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes((root / name).read_bytes())
    code = (
        "import sys; sys.path[:0] = sys.argv[1].split(':')\n"
        "import trialflow.trial, trialflow.trial.function, nni\n"
        "assert trialflow.trial.__file__.startswith(sys.argv[2]), trialflow.trial.__file__\n"
        "nni.report_final_result({'default': 0.5})"
    )
    env = {"PATH": "/usr/bin:/bin"}
    result = subprocess.run(
        [sys.executable, "-I", "-c", code, packing.sdk_pythonpath(str(tmp_path)), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    assert "final result" in result.stdout

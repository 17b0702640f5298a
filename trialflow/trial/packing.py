"""Packing a trial code directory for another machine, the way NNI's remote mode does.

``.nniignore`` files (the top one and any nested one, each applying to its own
folder, with gitignore semantics via pathspec) leave files out; NNI's limits
(2,000 files, 300 MB) are enforced with an error that says what to ignore.
The archive is deterministic (sorted names, zeroed times and owners), so its
hash names the code *content*: a machine that already has that hash needs no
upload, for a second trial or a second experiment alike. Machines get the
archive streamed as it is written (``ArchiveStream``): a 300 MB folder never
sits in memory, and gzip is used only where the sample says it pays.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import queue
import stat
import tarfile
import threading
import zlib
from collections.abc import AsyncGenerator, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import pathspec

IGNORE_FILE = ".nniignore"
#: trialflow's own folder, never staged wherever it sits in a code directory: a `trialflow run`
#: home (its private Airflow's database and logs, the experiment store: NNI's configs put the
#: code beside the config, so ``trialCodeDirectory: .`` holds it) or a trial's control folder.
#: Besides what it would carry away, copying a live SQLite file reads half a transaction, and
#: opening and closing it from a process that has it open (a triggerer's start) drops that
#: process's locks on it (SQLite's POSIX locks), so another process may reset the write-ahead
#: log under it: measured on OpenPAI's staging, a trial's writes from then on were lost.
OWN_FOLDER = ".trialflow"
MAX_FILES = 2000
MAX_BYTES = 300 * 1024 * 1024


class CodeDirectoryError(ValueError):
    """The code directory cannot be staged as it is; the message says what to change."""


@dataclass(frozen=True)
class PackedCode:
    archive: bytes
    digest: str
    file_count: int
    total_bytes: int

    @property
    def short_digest(self) -> str:
        return self.digest[:16]


def collect_files(code_dir: Path, exclude: Iterable[Path] = ()) -> list[Path]:
    """Files (and links) to stage, relative to ``code_dir``, sorted; ignored folders are not
    even walked.

    ``.nniignore`` files follow gitignore: the deepest file that has something to say about a
    path decides, and within a file the last matching pattern (so a sub-folder's ``!*.bin``
    brings back what a parent's ``*.bin`` left out, and nothing comes back from inside an
    ignored folder). Links travel as links; one that leads out of the folder is refused here,
    since a machine or pod would not have what it points to. A folder whose files are all
    ignored is refused too: the trial would start with nothing. ``exclude`` names files that
    never travel whatever the ignore files say (the experiment's config: it may hold secrets),
    and trialflow's own folders (OWN_FOLDER) are never walked.
    """
    root = Path(code_dir)
    if not root.is_dir():
        raise CodeDirectoryError(f"trialCodeDirectory {root} does not exist or is not a folder")
    real_root = root.resolve()
    never = {Path(p).resolve() for p in exclude}
    specs: dict[Path, pathspec.GitIgnoreSpec] = {}
    found: list[Path] = []
    ignored_any = False

    def ignored(rel: Path, is_dir: bool) -> bool:
        for base in [rel.parent, *rel.parent.parents]:  # the deepest .nniignore first
            spec = specs.get(base)
            if spec is None:
                continue
            inner = rel.relative_to(base).as_posix() + ("/" if is_dir else "")
            verdict = spec.check_file(inner).include
            if verdict is not None:
                return bool(verdict)
        return False

    def check_link(rel: Path) -> None:
        target = (root / rel).resolve()
        if target != real_root and real_root not in target.parents:
            raise CodeDirectoryError(
                f"trialCodeDirectory {root}: {rel.as_posix()} is a link to {os.readlink(root / rel)}, outside the "
                f"folder; trials on another machine would not have it. Copy what it points to into the folder, or "
                f"list {rel.as_posix()} in {root / IGNORE_FILE}"
            )

    for folder, dirs, files in os.walk(root):
        here = Path(folder)
        rel_here = here.relative_to(root)
        if IGNORE_FILE in files:
            lines = (here / IGNORE_FILE).read_text(encoding="utf-8", errors="replace").splitlines()
            specs[rel_here] = pathspec.GitIgnoreSpec.from_lines(lines)
        kept_dirs = []
        for name in sorted(dirs):
            rel = rel_here / name
            if name == OWN_FOLDER:
                continue  # never staged, and never opened (see OWN_FOLDER)
            if ignored(rel, True):
                ignored_any = True
                continue
            if (here / name).is_symlink():  # os.walk does not follow it: it travels as a link
                check_link(rel)
                found.append(rel)
            else:
                kept_dirs.append(name)
        dirs[:] = kept_dirs
        for name in sorted(files):
            rel = rel_here / name
            if ignored(rel, False):
                ignored_any = True
            elif (here / name).resolve() not in never:
                if (here / name).is_symlink():
                    check_link(rel)
                found.append(rel)
    if not found and ignored_any:
        raise CodeDirectoryError(
            f"trialCodeDirectory {root}: the {IGNORE_FILE} files leave out every file, so "
            "nothing would reach the trials (a pattern such as * ignores everything)"
        )
    return sorted(found, key=lambda p: p.as_posix())


def _largest(root: Path, files: list[Path], n: int = 5) -> str:
    sizes = sorted(((root / f).lstat().st_size, f.as_posix()) for f in files)[-n:]
    return ", ".join(f"{name} ({size / 1e6:.1f} MB)" for size, name in reversed(sizes))


def check_limits(root: Path, files: list[Path]) -> int:
    """Total bytes, or CodeDirectoryError naming the folder, the numbers and the way out."""
    if len(files) > MAX_FILES:
        top = sorted(
            {f.parts[0] for f in files if len(f.parts) > 1}, key=lambda d: -sum(1 for f in files if f.parts[0] == d)
        )[:5]
        raise CodeDirectoryError(
            f"trialCodeDirectory {root} has {len(files)} files to upload; the limit is {MAX_FILES} (as NNI). "
            f"List what trials do not need in {root / IGNORE_FILE} (gitignore syntax); "
            f"the folders with most files: {', '.join(top) or '(top level)'}"
        )
    total = sum((root / f).lstat().st_size for f in files)
    if total > MAX_BYTES:
        raise CodeDirectoryError(
            f"trialCodeDirectory {root} has {total / 1e6:.0f} MB to upload; the limit is "
            f"{MAX_BYTES // (1024 * 1024)} MB (as NNI). List data and outputs in {root / IGNORE_FILE}; "
            f"the largest files: {_largest(root, files)}"
        )
    return total


def pack(code_dir: Path, exclude: Iterable[Path] = ()) -> PackedCode:
    root = Path(code_dir)
    files = collect_files(root, exclude)
    return pack_files(root, files, check_limits(root, files))


def pack_files(root: Path, files: list[Path], total: int | None = None) -> PackedCode:
    """A deterministic .tar.gz of ``files`` (relative to ``root``) in memory, named by its
    content: for small archives only (the SDK, a ConfigMap's code); machines get theirs
    streamed (``ArchiveStream``)."""
    if total is None:
        total = sum((root / f).lstat().st_size for f in files)
    chunks: list[bytes] = []
    digest = write_archive(root, files, chunks.append, compress=True)
    return PackedCode(b"".join(chunks), digest, len(files), total)


#: Bytes per chunk handed on by the archive writer, and chunks waiting at most: what a
#: streamed archive holds in memory whatever the folder's size.
CHUNK_BYTES = 1024 * 1024
QUEUE_DEPTH = 4


class _ArchiveWriter:
    """tarfile's output file: hashes the raw tar (the digest names the content, compressed or
    not), gzips it when asked, and hands it on in chunks of about CHUNK_BYTES."""

    def __init__(self, emit: Callable[[bytes], None], compress: bool):
        self._emit = emit
        self._hash = hashlib.sha256()
        # gzip framing from zlib itself (wbits 31): no file name, time 0, so the bytes are deterministic
        self._zip = zlib.compressobj(1, zlib.DEFLATED, 31) if compress else None
        self._buffer = bytearray()
        self._offset = 0

    def tell(self) -> int:  # tarfile asks where it is when it opens and closes
        return self._offset

    def write(self, data: bytes) -> int:
        self._hash.update(data)
        self._offset += len(data)
        self._buffer += self._zip.compress(data) if self._zip is not None else data
        if len(self._buffer) >= CHUNK_BYTES:
            self._emit(bytes(self._buffer))
            self._buffer.clear()
        return len(data)

    def finish(self) -> str:
        if self._zip is not None:
            self._buffer += self._zip.flush()
        if self._buffer:
            self._emit(bytes(self._buffer))
            self._buffer.clear()
        return self._hash.hexdigest()


def write_archive(root: Path, files: list[Path], emit: Callable[[bytes], None], compress: bool) -> str:
    """Write the deterministic tar of ``files`` to ``emit`` in chunks (sorted names, zeroed
    times and owners, so equal content gives equal bytes); return the raw tar's sha256."""
    writer = _ArchiveWriter(emit, compress)
    # Level 1 when compressing: most of gzip's gain on source code at a fraction of its time.
    with tarfile.open(
        fileobj=writer,  # type: ignore[call-overload]  # tarfile needs only write and tell
        mode="w",
        format=tarfile.PAX_FORMAT,
        copybufsize=CHUNK_BYTES,
    ) as tar:
        for rel in files:
            info = tar.gettarinfo(str(root / rel), arcname=rel.as_posix())
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            if info.isfile():
                with open(root / rel, "rb") as fh:
                    tar.addfile(info, fh)
            elif info.issym():
                tar.addfile(info)  # the extractor refuses links that point outside
            # sockets, fifos, devices: never part of a code directory; skipped
    return writer.finish()


#: What ``worth_compressing`` reads: the start of the largest files, up to this much.
SAMPLE_BYTES = 64 * 1024
SAMPLE_BUDGET = 4 * 1024 * 1024


def worth_compressing(root: Path, files: list[Path]) -> bool:
    """Whether gzip pays for this folder. Level 1 turns source code into a tenth of its size at
    ~4 ms per MB, but spends ~30 ms per MB on data that does not shrink (weights, datasets,
    archives): for 300 MB of those, 8 s, several times what sending them costs on a LAN. The
    largest files carry most of the bytes, so the start of each, largest first, is the sample;
    compress when it shrinks by a third or more."""
    sizes = []
    for rel in files:
        st = (root / rel).lstat()
        if stat.S_ISREG(st.st_mode):
            sizes.append((st.st_size, rel))
    raw = packed = 0
    for _, rel in sorted(sizes, key=lambda pair: (-pair[0], pair[1].as_posix())):
        if raw >= SAMPLE_BUDGET:
            break
        with open(root / rel, "rb") as fh:
            block = fh.read(SAMPLE_BYTES)
        raw += len(block)
        packed += len(zlib.compress(block, 1))
    return raw == 0 or packed < raw * 2 / 3


class _Abandoned(Exception):
    """The reader of an ArchiveStream went away: the writer stops."""


class ArchiveStream:
    """The archive of a folder, made while it is sent: a writer thread reads the files and
    hands chunks through a queue QUEUE_DEPTH deep, so what is in memory stays a few MiB for
    a 300 MB folder, and reading, hashing and compressing overlap the upload. The digest is
    known once the last chunk is out. Each ``chunks()`` is a fresh pass over the files, so a
    retried upload sends the same bytes again."""

    def __init__(self, root: Path, files: list[Path], compress: bool):
        self.root = Path(root)
        self.files = files
        self.compress = compress
        self.digest: str | None = None

    async def chunks(self) -> AsyncGenerator[bytes, None]:
        handoff: queue.Queue[bytes | tuple[str, object]] = queue.Queue(maxsize=QUEUE_DEPTH)
        stop = threading.Event()

        def put(item: bytes | tuple[str, object]) -> None:
            while not stop.is_set():
                try:
                    handoff.put(item, timeout=0.1)
                    return
                except queue.Full:
                    continue
            raise _Abandoned

        def produce() -> None:
            try:
                result: tuple[str, object] = ("digest", write_archive(self.root, self.files, put, self.compress))
            except _Abandoned:
                return
            except BaseException as exc:  # handed to the reader, raised there
                result = ("error", exc)
            try:
                put(result)
            except _Abandoned:
                pass

        def take() -> bytes | tuple[str, object] | None:
            while not stop.is_set():
                try:
                    return handoff.get(timeout=0.1)
                except queue.Empty:
                    continue
            return None

        writer = threading.Thread(target=produce, name="trialflow-archive", daemon=True)
        writer.start()
        try:
            while True:
                item = await asyncio.to_thread(take)
                if isinstance(item, bytes):
                    yield item
                    continue
                assert item is not None
                kind, value = item
                if kind == "error":
                    assert isinstance(value, BaseException)
                    raise value
                self.digest = str(value)
                return
        finally:
            stop.set()  # a reader that stopped early: the writer ends at its next chunk


#: trialflow's stdlib-only trial SDK: what a trial needs on PYTHONPATH to ``import trialflow.trial``.
#: Its ``nni`` stand-in (trialflow/trial/shim/nni) answers ``import nni`` where NNI is not
#: installed, and hands over to the real nni where it is.
SHIM_DIR = "trialflow/trial/shim"
SDK_FILES = (
    "trialflow/__init__.py",
    "trialflow/trial/__init__.py",
    "trialflow/trial/wire.py",
    "trialflow/trial/lean_json.py",
    "trialflow/trial/function.py",
    "trialflow/trial/inputs.py",
    f"{SHIM_DIR}/nni/__init__.py",
    f"{SHIM_DIR}/nni/utils.py",
)


def sdk_pythonpath(sdk_dir: str) -> str:
    """The PYTHONPATH entries (':'-joined, unquoted) that make an SDK folder's ``trialflow.trial``
    and ``nni`` importable."""
    return f"{sdk_dir}:{sdk_dir}/{SHIM_DIR}"


_sdk_cache: list[PackedCode] = []


def pack_sdk() -> PackedCode:
    """The light SDK as an archive, shipped beside the code to machines and pods (so trial code
    using it needs nothing installed there). Packed once per process."""
    if not _sdk_cache:
        import trialflow

        root = Path(trialflow.__file__).resolve().parent.parent
        _sdk_cache.append(pack_files(root, [Path(f) for f in SDK_FILES]))
    return _sdk_cache[0]


# -- knowing the digest without packing again --------------------------------------------


def cache_dir() -> Path:
    return Path(os.environ.get("TRIALFLOW_CACHE") or Path.home() / ".cache" / "trialflow").expanduser() / "packs"


def fingerprint(root: Path, files: list[Path]) -> str:
    """A cheap identity of the folder's current state: names, sizes, modes, mtimes."""
    h = hashlib.sha256(str(Path(root).resolve()).encode())
    for rel in files:
        st = (Path(root) / rel).lstat()
        h.update(f"{rel.as_posix()}\0{st.st_size}\0{st.st_mode}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def cached_digest(fp: str) -> str | None:
    """The content digest last packed for the folder state ``fp`` (see ``fingerprint``), if
    any: lets a second trial or a second experiment find its code already staged without
    reading it again."""
    try:
        return (cache_dir() / f"{fp}.digest").read_text().strip() or None
    except OSError:
        return None


def remember_digest(fp: str, digest: str) -> None:
    try:
        folder = cache_dir()
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f"{fp}.digest.{os.getpid()}"
        tmp.write_text(digest)
        os.replace(tmp, folder / f"{fp}.digest")
    except OSError:
        pass  # a cache: without it, the code is packed again

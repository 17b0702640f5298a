"""Reading the files a trial can write: inside its folder only, regular files only.

A trial's code owns its folder: it can put a symlink where its ``stdout`` or its
``.nni/metrics`` was (to ``/etc/shadow``, to another trial's folder), or a FIFO
that never answers. Whoever reads those files (the follow loop, the experiment
pages) may run as another user than the trial, so every component below the
trial's folder is opened with ``O_NOFOLLOW`` relative to the one above it
(``openat``), and only a regular file is read. No Airflow, no platform.
"""

from __future__ import annotations

import os
import stat
from pathlib import PurePosixPath

#: Opening a FIFO or a device would block or reach outside; O_NONBLOCK makes the open return,
#: and the fstat below refuses what is not a regular file.
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
_DIR_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0)


class TrialFileRefused(OSError):
    """The path inside the trial's folder is a symlink, not a regular file, or leads outside."""


def open_in_folder(folder: str | os.PathLike[str], name: str) -> int:
    """A read-only descriptor of ``folder/name``, a regular file reached without following any
    symlink below ``folder`` (nor ``folder`` itself). FileNotFoundError when it is not there
    (yet); TrialFileRefused, naming ``name`` only, when it is there but not a plain file."""
    parts = _inside(name)
    parent = _walk(folder, parts[:-1], name)
    try:
        fd = os.open(parts[-1], _FILE_FLAGS, dir_fd=parent)
    except OSError as exc:
        raise _refused_or_missing(exc, name) from None
    finally:
        os.close(parent)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise TrialFileRefused(f"{name} in the trial's folder is not a regular file: not read")
        os.set_blocking(fd, True)
        return fd
    except BaseException:
        os.close(fd)
        raise


def stays_below(name: str) -> bool:
    """Whether relative name ``name`` (``/``-separated) names something below its folder: not
    absolute, no empty, ``.`` or ``..`` part. For names another writer gave (a manifest in the
    store, an asset event), checked before they are joined to a path."""
    parts = name.split("/")
    return bool(name) and not name.startswith("/") and not any(p in ("", ".", "..") for p in parts)


def _inside(name: str) -> tuple[str, ...]:
    """``name``'s parts, refused unless it is a relative path that stays inside the folder."""
    parts = PurePosixPath(name).parts
    if not parts or any(p in ("..", "/") for p in parts) or PurePosixPath(name).is_absolute():
        raise TrialFileRefused(f"{name!r} is not a path inside the trial's folder")
    return parts


def _walk(folder: str | os.PathLike[str], parts: tuple[str, ...], name: str) -> int:
    """A descriptor of ``folder`` and then of each of ``parts`` below it, none followed if it
    is a symlink (the one returned is the caller's to close)."""
    try:
        fd = os.open(folder, _DIR_FLAGS)
    except OSError as exc:
        raise _refused_or_missing(exc, "the trial's folder") from None
    for part in parts:
        try:
            child = _child_folder(fd, part, name)
        finally:
            os.close(fd)
        fd = child
    return fd


def _refused_or_missing(exc: OSError, what: str) -> OSError:
    import errno

    if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
        # ELOOP: a symlink where O_NOFOLLOW asked for none; ENOTDIR: a symlink or file where a
        # folder should be (O_DIRECTORY | O_NOFOLLOW).
        return TrialFileRefused(f"{what} in the trial's folder is a symlink or not what it should be: not read")
    return exc


def read_in_folder(folder: str | os.PathLike[str], name: str, offset: int, limit: int) -> bytes:
    """Up to ``limit`` bytes of ``folder/name`` from ``offset``; nothing when it is not there
    yet. TrialFileRefused as :func:`open_in_folder`."""
    try:
        fd = open_in_folder(folder, name)
    except FileNotFoundError:
        return b""
    try:
        return os.pread(fd, limit, offset)
    finally:
        os.close(fd)


def tail_in_folder(folder: str | os.PathLike[str], name: str, limit: int) -> tuple[bytes, int]:
    """The last ``limit`` bytes of ``folder/name`` and the file's size (FileNotFoundError,
    TrialFileRefused as :func:`open_in_folder`)."""
    fd = open_in_folder(folder, name)
    try:
        size = os.fstat(fd).st_size
        return os.pread(fd, limit, max(0, size - limit)), size
    finally:
        os.close(fd)


def last_line(data: bytes, limit: int = 300) -> str | None:
    """The last non-empty line of a trial's output tail (a traceback's ``ValueError: ...``),
    at most ``limit`` characters: what a failed trial's message quotes, so the reason shows
    in the table and a search finds it."""
    for raw in reversed(data.decode("utf-8", "replace").splitlines()):
        line = "".join(ch for ch in raw.strip() if ch.isprintable())
        if line:
            return line if len(line) <= limit else line[: limit - 1] + "…"
    return None


def read_small(folder: str | os.PathLike[str], name: str, limit: int = 65536) -> str | None:
    """A small control file of the trial's folder as text (a cancel record, an exit code, a job
    id), or None when it is not there or is not a regular file in the folder: the trial could
    have put a symlink or a FIFO in its place."""
    try:
        fd = open_in_folder(folder, name)
    except OSError:
        return None
    try:
        return os.pread(fd, limit, 0).decode("utf-8", "replace")
    finally:
        os.close(fd)


#: The most files and folder levels a listing walks (a checkpoint of a model: a few files; a
#: trial that writes millions is refused, not walked).
MAX_LISTED_FILES = 10_000
MAX_LISTED_DEPTH = 16


def files_in_folder(
    folder: str | os.PathLike[str], name: str, refused: list[str] | None = None
) -> list[tuple[str, int]]:
    """The regular files under ``folder/name`` (relative to it, sorted) with their sizes, every
    level opened without following a symlink. TrialFileRefused, naming the entry, for a symlink,
    a FIFO or a device below it, or past MAX_LISTED_FILES / MAX_LISTED_DEPTH: a checkpoint is
    kept whole or refused, never with a file left out. With ``refused`` (a trial's artifacts,
    each file its own), such an entry is said there and left out, and the rest listed."""
    found: list[tuple[str, int]] = []
    top = open_folder_in_folder(folder, name)
    stack: list[tuple[int, str, int]] = [(top, "", 0)]
    try:
        while stack:
            fd, prefix, depth = stack.pop()
            try:
                listed = []
                with os.scandir(fd) as entries:
                    for entry in entries:  # counted as they come: a huge folder is never held whole
                        listed.append(entry)
                        if len(found) + len(listed) > MAX_LISTED_FILES:
                            raise TrialFileRefused(f"{name} holds more than {MAX_LISTED_FILES} files")
                for entry in sorted(listed, key=lambda e: e.name):
                    relative = f"{prefix}{entry.name}"
                    if entry.is_dir(follow_symlinks=False):
                        if depth + 1 >= MAX_LISTED_DEPTH:
                            raise TrialFileRefused(f"{name}/{relative} is more than {MAX_LISTED_DEPTH} folders deep")
                        child = _child_folder(fd, entry.name, f"{name}/{relative}")
                        stack.append((child, f"{relative}/", depth + 1))
                    elif entry.is_file(follow_symlinks=False):
                        found.append((relative, entry.stat(follow_symlinks=False).st_size))
                        if len(found) > MAX_LISTED_FILES:
                            raise TrialFileRefused(f"{name} holds more than {MAX_LISTED_FILES} files")
                    elif refused is not None:
                        refused.append(f"{name}/{relative} is a symlink or not a regular file: not read")
                    else:
                        raise TrialFileRefused(f"{name}/{relative} is a symlink or not a regular file: not read")
            finally:
                os.close(fd)
    finally:
        for fd, _, _ in stack:
            os.close(fd)
    return sorted(found)


def open_folder_in_folder(folder: str | os.PathLike[str], name: str) -> int:
    """A descriptor of the folder ``folder/name``, reached as :func:`open_in_folder` reaches a file."""
    return _walk(folder, _inside(name), name)


def _child_folder(fd: int, part: str, what: str) -> int:
    """The folder ``part`` below the open folder ``fd``, not followed if it is a symlink."""
    try:
        return os.open(part, _DIR_FLAGS, dir_fd=fd)
    except OSError as exc:
        raise _refused_or_missing(exc, what) from None

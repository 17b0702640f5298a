"""Safe extraction of a staged code archive. Standard library only, Python 3.6+.

This file is also the program that runs on a remote machine and in a pod: its
source is sent to the machine's Python (``python3 - ARCHIVE DEST``), so the
checks that tests run here are the checks that run there.

Why it never judges a link by its text alone: a chain of members can escape
even when every single link looks harmless on paper (``p -> .``, then
``p/p/y -> ../..``, then a file ``p/p/y/ESCAPED``). So nothing is ever written
*through* a link:

1. Every member is checked first: a relative name without ``..``, a file, a
   folder, a symbolic link or a hard link to an earlier file; no name twice
   (a later member would replace an earlier one); no member below a symbolic
   link's name; the archive within NNI's upload limits. One bad member
   refuses the whole archive before anything is written.
2. Folders, files and hard links are written into a fresh folder beside DEST
   while it holds no symbolic link at all, so every path is a real folder.
3. Symbolic links are made last, and then each is resolved on disk (chains
   included) and must land inside the folder; otherwise the folder is removed.
4. The folder is renamed to DEST: DEST appears whole or not at all.
"""

import os
import posixpath
import shutil
import sys
import tarfile
from typing import Iterable, List, Tuple  # noqa: F401 (the type comments': Python 3.6 runs this file)

#: (name, member) pairs of one kind, as check_members sorts them.
Members = List[Tuple[str, tarfile.TarInfo]]

#: NNI's upload limits (trialflow.trial.packing.MAX_FILES / MAX_BYTES): an archive the packer
#: could not have made is not unpacked, whatever it says about itself.
MAX_FILES = 2000
MAX_BYTES = 300 * 1024 * 1024
#: Members of any kind (folders included), against archives of millions of empty entries.
MAX_MEMBERS = 20000
_CHUNK = 1024 * 1024


class UnsafeArchive(Exception):
    pass


def member_name(member):  # type: (tarfile.TarInfo) -> str
    """The member's name, normalised, or raise UnsafeArchive saying why it cannot be one."""
    name = member.name
    if not name or "\0" in name:
        raise UnsafeArchive("refused archive member %r: empty or invalid name" % (name,))
    if name.startswith("/") or name.startswith("\\") or (len(name) > 1 and name[1] == ":"):
        raise UnsafeArchive("refused archive member %r: absolute path" % (name,))
    if ".." in name.replace("\\", "/").split("/"):
        raise UnsafeArchive("refused archive member %r: path leaves the target folder" % (name,))
    normal = posixpath.normpath(name)
    if normal.startswith("../") or normal == "..":
        raise UnsafeArchive("refused archive member %r: path leaves the target folder" % (name,))
    return normal


def _lexically_inside(path):  # type: (str) -> bool
    """True if the relative ``path`` (normalised) stays in the folder it is relative to."""
    normal = posixpath.normpath(path)
    return not (normal == ".." or normal.startswith("../") or normal.startswith("/"))


def check_members(members):  # type: (Iterable[tarfile.TarInfo]) -> Tuple[Members, Members, Members, Members]
    """(folders, files, hard links, symbolic links) to extract, each a list of (name, member);
    UnsafeArchive for the first member that must not be extracted."""
    folders, files, hard, soft = [], [], [], []  # type: Members, Members, Members, Members
    seen = {}  # type: dict[str, str]
    total = 0
    for count, member in enumerate(members, 1):
        if count > MAX_MEMBERS:
            raise UnsafeArchive("refused archive: more than %d members" % MAX_MEMBERS)
        name = member_name(member)
        if name == ".":
            if not member.isdir():
                raise UnsafeArchive("refused archive member %r: not a folder" % (member.name,))
            continue
        if name in seen:
            raise UnsafeArchive(
                "refused archive member %r: it appears twice (the second would replace the first)" % (member.name,)
            )
        if member.isdir():
            folders.append((name, member))
        elif member.isfile():
            total += member.size
            files.append((name, member))
        elif member.issym():
            link = member.linkname
            if link.startswith("/") or link.startswith("\\"):
                raise UnsafeArchive("refused archive member %r: link to an absolute path" % (member.name,))
            if not link or not _lexically_inside(posixpath.join(posixpath.dirname(name), link)):
                raise UnsafeArchive("refused archive member %r: link points outside the target folder" % (member.name,))
            soft.append((name, member))
        elif member.islnk():
            target = member.linkname
            if target.startswith("/") or not _lexically_inside(target):
                raise UnsafeArchive("refused archive member %r: link points outside the target folder" % (member.name,))
            target = posixpath.normpath(target)
            if seen.get(target) != "file":
                raise UnsafeArchive(
                    "refused archive member %r: a hard link must name a file earlier in the "
                    "archive, not %r" % (member.name, member.linkname)
                )
            hard.append((name, member))
        else:
            raise UnsafeArchive("refused archive member %r: not a regular file, folder or link" % (member.name,))
        seen[name] = "file" if member.isfile() else "other"
        if len(files) + len(hard) + len(soft) > MAX_FILES:
            raise UnsafeArchive("refused archive: more than %d files (NNI's upload limit)" % MAX_FILES)
        if total > MAX_BYTES:
            raise UnsafeArchive(
                "refused archive: more than %d MB of files (NNI's upload limit)" % (MAX_BYTES // (1024 * 1024))
            )
    links = set(name for name, _ in soft)
    for name in seen:
        parent = posixpath.dirname(name)
        while parent:
            if parent in links:
                raise UnsafeArchive("refused archive member %r: it lies below the link %r" % (name, parent))
            if seen.get(parent) == "file":
                raise UnsafeArchive("refused archive member %r: it lies below the file %r" % (name, parent))
            parent = posixpath.dirname(parent)
    return folders, files, hard, soft


def _inside(root, path):  # type: (str, str) -> bool
    root = os.path.realpath(root)
    target = os.path.realpath(path)
    return target == root or target.startswith(root + os.sep)


def _mode(member, folder):  # type: (tarfile.TarInfo, bool) -> int
    # The owner can read and write (and enter folders); no set-id or sticky bits.
    return (member.mode | (0o700 if folder else 0o600)) & 0o755


def _write(tar, work, folders, files, hard, soft):  # type: (tarfile.TarFile, str, Members, Members, Members, Members) -> None
    for name, _member in folders:
        os.makedirs(os.path.join(work, name), exist_ok=True)
    for name, member in files:
        path = os.path.join(work, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        source = tar.extractfile(member)
        if source is None:  # checked to be a file: tarfile has no data for it
            raise UnsafeArchive("refused archive member %r: no data" % (member.name,))
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        with os.fdopen(fd, "wb") as out:
            left = member.size
            while left > 0:
                chunk = source.read(min(_CHUNK, left))
                if not chunk:
                    raise UnsafeArchive("refused archive member %r: truncated" % (member.name,))
                out.write(chunk)
                left -= len(chunk)
        os.chmod(path, _mode(member, False))
    for name, member in hard:
        path = os.path.join(work, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        os.link(os.path.join(work, posixpath.normpath(member.linkname)), path)
    for name, member in soft:
        path = os.path.join(work, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        os.symlink(member.linkname, path)
    for name, member in soft:  # every link in place: now chains resolve as they will for the trial
        if not _inside(work, os.path.join(work, name)):
            raise UnsafeArchive(
                "refused archive member %r: link points outside the target folder "
                "(through other links)" % (member.name,)
            )
    for name, member in reversed(folders):
        os.chmod(os.path.join(work, name), _mode(member, True))


def safe_extract(archive, dest):  # type: (str, str) -> None
    """Extract ``archive`` to ``dest`` (which must not exist, or be an empty folder)."""
    dest = os.path.abspath(dest)
    if os.path.lexists(dest) and not (os.path.isdir(dest) and not os.path.islink(dest) and not os.listdir(dest)):
        raise UnsafeArchive("refused to extract into %s: it exists and is not an empty folder" % dest)
    with tarfile.open(archive, "r:*") as tar:
        folders, files, hard, soft = check_members(tar)
        parent = os.path.dirname(dest)
        os.makedirs(parent, exist_ok=True)
        work = "%s.partial-%d" % (dest, os.getpid())
        shutil.rmtree(work, ignore_errors=True)
        os.mkdir(work, 0o755)
        try:
            _write(tar, work, folders, files, hard, soft)
            if os.path.isdir(dest):
                os.rmdir(dest)
            os.rename(work, dest)
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)
            raise


def main(argv):  # type: (List[str]) -> int
    if len(argv) != 3:
        sys.stderr.write("usage: unpack.py ARCHIVE DEST\n")
        return 2
    try:
        safe_extract(argv[1], argv[2])
    except UnsafeArchive as exc:
        sys.stderr.write("%s\n" % exc)
        return 3
    except (tarfile.TarError, OSError, EOFError) as exc:
        sys.stderr.write("cannot unpack %s: %s\n" % (argv[1], exc))
        return 4
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

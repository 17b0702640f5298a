"""Safe extraction of a staged code archive. Standard library only, Python 3.6+.

This file is also the program that runs on a remote machine: its source is
sent to the machine's Python on stdin (``python3 - ARCHIVE DEST``), so the
checks that tests run here are the checks that run there. Every member is
checked before anything is written: no absolute paths, no ``..``, no links
that lead outside DEST, no devices or fifos. One bad member refuses the whole
archive, and DEST is left untouched.
"""

import os
import posixpath
import sys
import tarfile


class UnsafeArchive(Exception):
    pass


def _inside(dest, path):
    dest = os.path.realpath(dest)
    target = os.path.realpath(os.path.join(dest, path))
    return target == dest or target.startswith(dest + os.sep)


def check_member(member, dest):
    """Why ``member`` must not be extracted into ``dest``, or None if it is safe."""
    name = member.name
    if name.startswith("/") or name.startswith("\\") or (len(name) > 1 and name[1] == ":"):
        return "absolute path"
    parts = posixpath.normpath(name).split("/")
    if ".." in parts or ".." in name.split("/"):
        return "path leaves the target folder"
    if not _inside(dest, name):
        return "path leaves the target folder"
    if member.issym() or member.islnk():
        link = member.linkname
        if link.startswith("/"):
            return "link to an absolute path"
        base = posixpath.dirname(name) if member.issym() else ""
        if not _inside(dest, posixpath.join(base, link)):
            return "link points outside the target folder"
    elif not (member.isfile() or member.isdir()):
        return "not a regular file, folder or link"
    return None


def safe_extract(archive, dest):
    with tarfile.open(archive, "r:*") as tar:
        members = tar.getmembers()
        for member in members:
            problem = check_member(member, dest)
            if problem:
                raise UnsafeArchive("refused archive member %r: %s" % (member.name, problem))
        os.makedirs(dest, exist_ok=True)
        for member in members:
            member.mode = (member.mode | 0o600) & 0o7755  # owner can read/write; no set-id bits
            tar.extract(member, dest, set_attrs=not member.issym())


def main(argv):
    if len(argv) != 3:
        sys.stderr.write("usage: unpack.py ARCHIVE DEST\n")
        return 2
    try:
        safe_extract(argv[1], argv[2])
    except UnsafeArchive as exc:
        sys.stderr.write("%s\n" % exc)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

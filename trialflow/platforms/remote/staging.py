"""Putting trial code and trialflow's SDK on the machines: once per content, never per trial.

Code is packed (``.nniignore`` honoured, NNI's size limits checked) while it
streams to the machine, named by its digest, uploaded only where that digest
is not yet staged (known from the last upload of the folder in this state, or
found there after the upload), unpacked by
trialflow's own stdlib unpacker (which refuses hostile archives) and made
read-only; each trial then gets a hard-linked view of it. Code that already
lies on NNI's sharedStorage, mounted by the user on both sides, is read in
place and never uploaded.
"""

from __future__ import annotations

import time
from pathlib import Path

from trialflow.config.model import SharedStorageConfig
from trialflow.platforms.remote.commands import exists_command, remove_file_command, staging_command, upload_command
from trialflow.platforms.remote.machines import Machine, Shell
from trialflow.platforms.remote.ssh import SshError
from trialflow.trial import unpack
from trialflow.trial.packing import (
    ArchiveStream,
    PackedCode,
    cached_digest,
    check_limits,
    collect_files,
    fingerprint,
    pack_sdk,
    remember_digest,
    worth_compressing,
)


class CodeStaging:
    """What is staged where, for one platform instance (a process may hold several)."""

    def __init__(self, shell: Shell):
        self.shell = shell
        self.shared: SharedStorageConfig | None = None
        self._staged: dict[tuple[int, str], str] = {}

    def shared_code_path(self, code_dir: Path) -> str | None:
        """Where the machines see ``code_dir``, if it lies on the shared storage and that storage
        is mounted here by the user (usermount); None means: upload it as usual."""
        shared = self.shared
        if shared is None or shared.local_mounted != "usermount":
            return None
        try:
            rel = Path(code_dir).resolve().relative_to(Path(shared.local_mount_point).resolve())
        except ValueError:
            return None
        return f"{shared.remote_mount_point.rstrip('/')}/{rel.as_posix()}".rstrip("/.") or "/"

    def mount_hint(self) -> str:
        shared = self.shared
        assert shared is not None
        source = (
            f"{shared.nfs_server}:{shared.exported_directory}"
            if shared.storage_type == "NFS"
            else f"the Azure blob container {shared.container_name}"
        )
        return f"mount {source} at {shared.remote_mount_point} on it (trialflow never runs sudo mount)"

    async def code_on(self, machine: Machine, code_dir: Path, exclude: tuple[Path, ...] = ()) -> tuple[str, bool]:
        """(folder with the code on ``machine``, whether trials read it in place)."""
        shared = self.shared_code_path(code_dir)
        if shared is None:
            root = Path(code_dir)
            files = collect_files(root, exclude)
            fp = fingerprint(root, files)
            digest = cached_digest(fp)
            if digest is not None:  # packed before in this state: staged there already?
                if (machine.index, digest) in self._staged:
                    return self._staged[(machine.index, digest)], False
                folder = await self.staged_folder(machine, digest[:16])
                if folder is not None:
                    self._staged[(machine.index, digest)] = folder
                    return folder, False
            check_limits(root, files)
            folder, digest = await self.stream(machine, ArchiveStream(root, files, worth_compressing(root, files)))
            remember_digest(fp, digest)
            return folder, False
        there = await self.shell.run(machine, exists_command(shared, "d"))
        if there.strip() != b"yes":
            raise SshError(
                f"machine {machine.target.label}: the code is on sharedStorage but {shared} is not "
                f"there; {self.mount_hint()}"
            )
        return shared, True

    async def sdk_on(self, machine: Machine) -> str:
        """The folder of trialflow's trial SDK on ``machine`` (put on PYTHONPATH)."""
        return await self.stage(machine, pack_sdk(), "sdk")

    async def staged_folder(self, machine: Machine, short_digest: str) -> str | None:
        """The folder holding content ``short_digest`` on ``machine``, if it was staged completely."""
        folder = f"{await self.shell.base(machine)}/.code/{short_digest}"
        found = await self.shell.run(machine, exists_command(f"{folder}/.complete"))
        return folder if found.strip() == b"yes" else None

    async def stream(self, machine: Machine, archive: ArchiveStream) -> tuple[str, str]:
        """Upload ``archive`` as it is written and stage it under its digest (learnt at the end
        of the upload; a machine that had it already keeps its copy and drops this one).
        Returns (folder, digest)."""
        base = await self.shell.base(machine)
        upload = f"{base}/.upload-code-{time.time_ns()}.tar"
        try:
            await self.shell.run(machine, upload_command(base, upload), archive.chunks)
        except BaseException:
            await self.shell.run(machine, remove_file_command(upload), check=False)  # the part that came
            raise
        assert archive.digest is not None  # the upload read the stream to its end
        folder = await self._unpack_there(machine, base, upload, archive.digest[:16])
        self._staged[(machine.index, archive.digest)] = folder
        return folder, archive.digest

    async def _unpack_there(self, machine: Machine, base: str, upload: str, short_digest: str) -> str:
        """Unpack an uploaded archive into its digest's folder with the checking unpacker."""
        await self.shell.run(machine, upload_command(base, f"{upload}.py"), Path(unpack.__file__).read_bytes())
        await self.shell.run(machine, staging_command(base, short_digest, upload, machine.python))
        return f"{base}/.code/{short_digest}"

    async def stage(self, machine: Machine, packed: PackedCode, kind: str) -> str:
        """Make ``packed`` present on ``machine`` (uploading only if its digest is new there);
        return the folder."""
        key = (machine.index, packed.digest)
        if key in self._staged:
            return self._staged[key]
        base = await self.shell.base(machine)
        folder = f"{base}/.code/{packed.short_digest}"
        if await self.staged_folder(machine, packed.short_digest) is None:
            archive = f"{base}/.upload-{kind}-{packed.short_digest}-{time.time_ns()}.tar.gz"
            await self.shell.run(machine, upload_command(base, archive), packed.archive)
            await self._unpack_there(machine, base, archive, packed.short_digest)
        self._staged[key] = folder
        return folder

"""A real PostgreSQL server from Debian's packages on 127.0.0.1 for the test session.

A free port, password authentication (scram-sha-256), no fsync; its folder is outside
pytest's (as root those are private to root, and the server runs as ``postgres``). It can be
stopped and started again on the same port and data, as the fault suite does to show a
deployment survives its database restarting.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path


def server_bin() -> Path | None:
    """Debian's server binaries (postgresql-NN), newest first, or initdb on PATH."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parts[-3]), reverse=True)
    if found:
        return found[0].parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def missing_reason() -> str | None:
    if server_bin() is None:
        return "PostgreSQL server binaries not found (Debian package postgresql; .ci/run installs it)"
    return None


@dataclass
class PostgresServer:
    bin_dir: Path
    root: Path
    port: int
    password: str
    user: str | None  # the OS user it runs as: initdb refuses to run as root
    process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"postgresql://trialflow:{self.password}@127.0.0.1:{self.port}/postgres"

    @classmethod
    def create(cls) -> PostgresServer:
        bin_dir = server_bin()
        assert bin_dir is not None, missing_reason()
        user = "postgres" if os.geteuid() == 0 else None
        root = Path(tempfile.mkdtemp(prefix="trialflow-pg-"))
        password = "pg-" + os.urandom(6).hex()
        (root / "pw").write_text(password)
        if user:
            shutil.chown(root, user)
            shutil.chown(root / "pw", user)
        init = subprocess.run(
            [
                str(bin_dir / "initdb"),
                "-D",
                str(root / "data"),
                "-U",
                "trialflow",
                "-A",
                "scram-sha-256",
                f"--pwfile={root / 'pw'}",
                "--no-sync",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            **({"user": user} if user else {}),
        )
        if init.returncode != 0:
            shutil.rmtree(root, ignore_errors=True)
            raise RuntimeError(f"initdb failed: {init.stderr[-2000:]}")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        return cls(bin_dir, root, port, password, user)

    def start(self, timeout: float = 60) -> None:
        self.process = subprocess.Popen(
            [
                str(self.bin_dir / "postgres"),
                "-D",
                str(self.root / "data"),
                "-h",
                "127.0.0.1",
                "-p",
                str(self.port),
                "-k",
                str(self.root),
                "-c",
                "fsync=off",
                "-c",
                "max_connections=300",
            ],
            stdout=subprocess.DEVNULL,
            stderr=open(self.root / "server.log", "a"),
            **({"user": self.user} if self.user else {}),
        )
        deadline = time.monotonic() + timeout
        while not self.ready():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("PostgreSQL did not start: " + (self.root / "server.log").read_text()[-2000:])
            time.sleep(0.2)

    def ready(self) -> bool:
        probe = [str(self.bin_dir / "pg_isready"), "-h", "127.0.0.1", "-p", str(self.port)]
        return subprocess.run(probe, capture_output=True).returncode == 0

    def stop(self, how: signal.Signals = signal.SIGINT) -> None:
        """SIGINT: PostgreSQL's "fast" shutdown (connections are cut, nothing is lost)."""
        if self.process is None:
            return
        self.process.send_signal(how)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
        self.process = None

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)

"""Real OpenSSH servers for tests: each on 127.0.0.1 and a free port, with its own host key,
its own user and home folder, key and password authentication. Started and stopped by the
tests (pytest fixtures in tests/conftest.py)."""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


@dataclass
class SshServer:
    name: str
    port: int
    user: str
    home: Path
    password: str
    client_key: Path  # the private key a client logs in with
    host_key_line: str  # "<type> <base64>" of the server's host key
    root: Path
    pid: int | None = None

    @property
    def known_hosts_line(self) -> str:
        return f"[127.0.0.1]:{self.port} {self.host_key_line}"

    @property
    def log(self) -> Path:
        return self.root / "sshd.log"

    def start(self) -> None:
        subprocess.run([SSHD, "-f", str(self.root / "sshd_config"), "-E", str(self.log)], check=True, timeout=30)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                self.pid = int((self.root / "sshd.pid").read_text())
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except (OSError, ValueError):
                time.sleep(0.05)
        raise RuntimeError(f"sshd {self.name} did not start: {self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        """Stop the listener and every session it started (as a crashed host would)."""
        if self.pid is None:
            return
        subprocess.run(["pkill", "-TERM", "-f", f"sshd: {self.user}"], capture_output=True)
        try:
            os.kill(self.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.kill(self.pid, 0)
                time.sleep(0.05)
            except ProcessLookupError:
                break
        (self.root / "sshd.pid").unlink(missing_ok=True)
        self.pid = None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ensure_user(user: str, home: Path, password: str) -> None:
    try:
        pwd.getpwnam(user)
    except KeyError:
        subprocess.run(["useradd", "-M", "-d", str(home), "-s", "/bin/bash", user], check=True)
    subprocess.run(["usermod", "-d", str(home), user], check=True, capture_output=True)
    subprocess.run(["chpasswd"], input=f"{user}:{password}", text=True, check=True)
    home.mkdir(parents=True, exist_ok=True)
    shutil.chown(home, user, user)
    home.chmod(0o755)


def make_server(name: str) -> SshServer:
    """A configured (not yet started) server whose user is ``trialflow-<name>``."""
    root = Path(tempfile.mkdtemp(prefix=f"trialflow-sshd-{name}-"))
    root.chmod(0o755)
    user = f"trialflow-{name}"
    home = root / "home"
    password = "pw-" + os.urandom(8).hex()
    _ensure_user(user, home, password)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(root / "host_key")], check=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(root / "client_key")], check=True)
    (root / "authorized_keys").write_text((root / "client_key.pub").read_text())
    (root / "authorized_keys").chmod(0o644)
    port = _free_port()
    (root / "sshd_config").write_text(f"""\
ListenAddress 127.0.0.1
Port {port}
HostKey {root / "host_key"}
PidFile {root / "sshd.pid"}
AuthorizedKeysFile {root / "authorized_keys"}
AllowUsers {user}
PasswordAuthentication yes
KbdInteractiveAuthentication no
PubkeyAuthentication yes
UsePAM no
StrictModes no
Subsystem sftp internal-sftp
MaxStartups 100:30:200
LogLevel VERBOSE
""")
    Path("/run/sshd").mkdir(exist_ok=True)
    host_key = (root / "host_key.pub").read_text().split()
    return SshServer(name, port, user, home, password, root / "client_key", " ".join(host_key[:2]), root)


def remove(server: SshServer) -> None:
    server.stop()
    subprocess.run(["pkill", "-KILL", "-u", server.user], capture_output=True)
    shutil.rmtree(server.root, ignore_errors=True)

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

import psutil

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
    #: Set by ``on_machine_of_its_own``: the server runs on a "machine" (its own namespaces).
    machine: Machine | None = None

    @property
    def known_hosts_line(self) -> str:
        return f"[127.0.0.1]:{self.port} {self.host_key_line}"

    @property
    def log(self) -> Path:
        return self.root / "sshd.log"

    def start(self) -> None:
        enter = self.machine.enter() if self.machine else []
        sshd = [SSHD, "-f", str(self.root / "sshd_config"), "-E", str(self.log)]
        subprocess.run(enter + sshd, check=True, timeout=30)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                pid = int((self.root / "sshd.pid").read_text())
                # On a machine, the pid file holds the pid its own namespace gave the server.
                self.pid = self.machine.outside_pid(pid) if self.machine else pid
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


_REAPER = """
import os, time
while True:
    try:
        os.wait()
    except ChildProcessError:
        time.sleep(0.2)
"""


@dataclass
class Machine:
    """A host of its own for an SSH server, as the Celery workers of tests/cluster are: its own
    hostname (UTS namespace), processes (PID namespace: it sees only its own; their init reaps
    the trials the server's sessions leave behind) and disk (mount namespace, an empty tmpfs over
    the user's home, so nothing the remote platform stages there is visible from outside). The
    network stays the machine's: the server still listens on 127.0.0.1 only."""

    hostname: str
    process: subprocess.Popen

    @property
    def init_pid(self) -> int:
        """The namespaces' init as this (the parent) namespace sees it: unshare's child."""
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            children = psutil.Process(self.process.pid).children()
            if children and children[0].name() == "python3":
                return children[0].pid
            time.sleep(0.05)
        raise RuntimeError(f"machine {self.hostname} did not start")

    def enter(self) -> list[str]:
        """The command prefix that runs a command on the machine."""
        return ["nsenter", "-t", str(self.init_pid), "--uts", "--pid", "--mount", "--"]

    def outside_pid(self, inside: int) -> int:
        """Our pid of the machine's process ``inside`` (the last field of NSpid is the pid in the
        innermost namespace)."""
        namespace = os.readlink(f"/proc/{self.init_pid}/ns/pid")
        for proc in psutil.process_iter():
            try:
                if os.readlink(f"/proc/{proc.pid}/ns/pid") != namespace:
                    continue
                status = Path(f"/proc/{proc.pid}/status").read_text()
            except OSError:
                continue
            nspid = next(line.split()[1:] for line in status.splitlines() if line.startswith("NSpid:"))
            if int(nspid[-1]) == inside:
                return proc.pid
        raise LookupError(f"no process {inside} on machine {self.hostname}")

    def shut_down(self) -> None:
        """Everything on the machine dies with its init."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait(timeout=30)


def on_machine_of_its_own(server: SshServer, hostname: str) -> SshServer:
    """Give a configured, not yet started server a machine of its own (see Machine)."""
    user = pwd.getpwnam(server.user)
    script = (
        'hostname "$1" && mount -t tmpfs -o "size=512m,mode=0755,uid=$3,gid=$4" trialflow-machine "$2" '
        '&& exec python3 -c "$5"'
    )
    process = subprocess.Popen(
        ["unshare", "--uts", "--pid", "--fork", "--kill-child", "--mount", "--mount-proc"]
        + ["--propagation", "private", "sh", "-c", script, "sh", hostname, str(server.home)]
        + [str(user.pw_uid), str(user.pw_gid), _REAPER],
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    server.machine = Machine(hostname, process)
    server.machine.init_pid  # noqa: B018 (waits until the machine is up)
    return server


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
    """A configured (not yet started) server whose user is ``trialflow-<worker><name>``."""
    root = Path(tempfile.mkdtemp(prefix=f"trialflow-sshd-{name}-"))
    root.chmod(0o755)
    # One user per parallel test worker (pytest-xdist's gw0, gw1...): a user shared by two
    # sessions had its home and password changed under the other, and its processes killed.
    user = f"trialflow-{os.environ.get('PYTEST_XDIST_WORKER', '')}{name}"
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
    if server.machine:
        server.machine.shut_down()
    shutil.rmtree(server.root, ignore_errors=True)

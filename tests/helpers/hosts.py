"""Names the test session resolves to 127.0.0.1 without touching the machine's /etc/hosts.

Azure's storage clients address an account as ``https://<account>.blob.<suffix>``, so the
Azure ML tests need a name for Azurite. As root, the test session moves into its own mount
namespace (before it starts any thread or process) and bind-mounts a copy of /etc/hosts with
the extra names over it: the session and everything it starts (Airflow's components, trials)
see them, nothing else on the machine does.
"""

from __future__ import annotations

import ctypes
import os
import socket
import tempfile

NAMES = ("devstoreaccount1.blob.trialflow.test",)
_CLONE_NEWNS = 0x00020000
_MS_REC, _MS_PRIVATE, _MS_BIND = 0x4000, 0x40000, 0x1000


def resolvable() -> str | None:
    """Why the names do not resolve here (None: they do)."""
    try:
        for name in NAMES:
            socket.getaddrinfo(name, 443)
    except OSError:
        return f"{NAMES[0]} does not resolve: the test session needs root to give itself that name"
    return None


def install() -> None:
    if os.geteuid() != 0 or resolvable() is None:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(_CLONE_NEWNS) != 0:
        return
    if libc.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None) != 0:
        return
    with open("/etc/hosts", encoding="utf-8") as fh:
        current = fh.read()
    folder = tempfile.mkdtemp(prefix="trialflow-hosts-")
    path = os.path.join(folder, "hosts")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(current.rstrip("\n") + "\n" + "".join(f"127.0.0.1 {name}\n" for name in NAMES))
    libc.mount(path.encode(), b"/etc/hosts", None, _MS_BIND, None)

"""SSH to trial machines: one connection per machine per event loop, many channels over it.

NNI opened channels without limit and hit sshd's MaxSessions (10 by default):
"Channel open failure" at trial concurrency >= 8. Here every connection has a
semaphore below that limit, so 12 or 100 trials share one connection and wait
their turn for a channel. A dropped connection is reopened with backoff on the
next command; host keys are verified unless a machine says otherwise, and then
it is logged once.

asyncssh is imported lazily (it comes with the ``ssh`` extra). Machines named
by an Airflow SSH connection (``sshConnId``) are opened by the opener the
platform was given (``Connections.ssh``: the SSH provider's SSHHookAsync, from
trialflow.hooks), so this module never imports Airflow.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trialflow.platforms.base import PlatformUnreachable

if TYPE_CHECKING:
    import asyncssh

log = logging.getLogger(__name__)

#: Channels at once per connection: below OpenSSH's default MaxSessions of 10, with room for
#: sessions sshd is still closing (at 8, a burst of short commands met "open failed").
CHANNELS_PER_CONNECTION = 6
RECONNECT_DELAYS = (0.5, 1.0, 2.0, 4.0)
CONNECT_TIMEOUT = 15.0
COMMAND_TIMEOUT = 120.0


def _as_bytes(output: bytes | str | None) -> bytes:
    """asyncssh types output as str or bytes; run with encoding=None, it is bytes."""
    if output is None:
        return b""
    return output if isinstance(output, bytes) else output.encode()


class SshError(RuntimeError):
    """A machine cannot be reached or used; the message names the machine and the cause."""


class SshUnreachable(SshError, PlatformUnreachable):
    """The machine stayed unreachable through the reconnect attempts (refused, timed out,
    dropped): it may come back."""


@dataclass(frozen=True)
class SshTarget:
    """How to reach one machine, and which host key to trust: ``host_key`` ("<type> <base64>")
    if given, else the ``known_hosts`` file; ``check_host_key=False`` trusts any key (logged)."""

    label: str
    host: str | None = None
    port: int = 22
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    key_file: str | None = None
    passphrase: str | None = field(default=None, repr=False)
    known_hosts: str = "~/.ssh/known_hosts"
    host_key: str | None = None
    check_host_key: bool = True
    conn_id: str | None = None


#: sshConnId -> an open asyncssh connection (Connections.ssh, given by the Airflow layer).
ConnIdOpener = Callable[[str], Awaitable["asyncssh.SSHClientConnection"]]
_warned_no_host_check: set[str] = set()


def describe_connect_error(target: SshTarget, exc: BaseException) -> str:
    """A message an NNI user can act on, for the failures they met most."""
    import asyncssh

    where = f"machine {target.label}"
    if isinstance(exc, asyncssh.HostKeyNotVerifiable):
        return (
            f"{where}: its host key is not trusted ({exc}); add it to known_hosts "
            "(ssh-keyscan), give hostKey, or set hostKeyCheck: false"
        )
    if isinstance(exc, asyncssh.PermissionDenied):
        return f"{where}: authentication failed for user {target.username!r} (wrong key or password?)"
    if isinstance(exc, (asyncssh.KeyImportError, asyncssh.KeyEncryptionError)):
        return f"{where}: cannot read the private key {target.key_file} ({exc}; wrong sshPassphrase?)"
    if isinstance(exc, (ConnectionRefusedError, asyncio.TimeoutError, TimeoutError, OSError)):
        return f"{where}: cannot connect to {target.host}:{target.port} ({exc or type(exc).__name__})"
    return f"{where}: {type(exc).__name__}: {exc}"


async def _open(target: SshTarget, opener: ConnIdOpener | None) -> asyncssh.SSHClientConnection:
    import asyncssh

    asyncssh.set_log_level(logging.WARNING)  # its INFO lines echo every command

    if target.conn_id is not None:
        if opener is None:
            raise SshError(
                f"machine {target.label}: sshConnId {target.conn_id!r} needs Airflow's connections "
                "(run it from an Airflow task, or give host/user in the config)"
            )
        return await opener(target.conn_id)
    options: dict[str, Any] = {
        "host": target.host,
        "port": target.port,
        "username": target.username,
        "connect_timeout": CONNECT_TIMEOUT,
        "keepalive_interval": 30,
    }
    if target.password:
        options["password"] = target.password
    if target.key_file:
        import os

        if not os.path.isfile(os.path.expanduser(target.key_file)):
            # asyncssh would report an OSError, read as "cannot connect" and retried for seconds
            raise SshError(f"machine {target.label}: sshKeyFile {target.key_file} does not exist here")
        options["client_keys"] = [target.key_file]
        if target.passphrase:
            options["passphrase"] = target.passphrase
    elif target.password:
        options["client_keys"] = None  # password only: do not offer ~/.ssh keys
    options["known_hosts"] = trusted_host_keys(target)
    return await asyncssh.connect(**options)


def trusted_host_keys(target: SshTarget) -> Any:
    """asyncssh's ``known_hosts`` argument for ``target``: its host key, its known_hosts file
    (an empty trust list when that file is missing: the host is then reported untrusted), or
    None when checking is off."""
    import os

    import asyncssh

    if not target.check_host_key:
        if target.label not in _warned_no_host_check:
            _warned_no_host_check.add(target.label)
            log.warning("Host key checking is off for machine %s (hostKeyCheck: false)", target.label)
        return None
    if target.host_key:
        try:
            return ([asyncssh.import_public_key(target.host_key)], [], [])
        except (asyncssh.KeyImportError, ValueError) as exc:
            raise SshError(
                f"machine {target.label}: hostKey is not a public key line like 'ssh-ed25519 AAAA...' ({exc})"
            ) from exc
    path = os.path.expanduser(target.known_hosts)
    return path if os.path.isfile(path) else ([], [], [])


class _Connection:
    def __init__(self, target: SshTarget, opener: ConnIdOpener | None):
        self.target = target
        self.opener = opener
        self.conn: asyncssh.SSHClientConnection | None = None
        self.lock = asyncio.Lock()
        self.channels = asyncio.Semaphore(CHANNELS_PER_CONNECTION)

    async def get(self, broken: asyncssh.SSHClientConnection | None = None) -> asyncssh.SSHClientConnection:
        """The open connection; ``broken`` is one a command just failed on, replaced unless another
        command replaced it already (closing a fresh connection would fail everything on it)."""
        async with self.lock:
            if self.conn is not None and (self.conn is broken or self.conn.is_closed()):
                self.conn.close()
                self.conn = None
            if self.conn is None:
                self.conn = await _open(self.target, self.opener)
            return self.conn


class ConnectionLost(Exception):
    """The connection closed before a command reported its exit status."""


#: A command's input made while it is sent (an archive written as it uploads); called once per
#: attempt, so a retried command gets its input from the start again.
StdinSource = Callable[[], AsyncGenerator[bytes, None]]


class InputFailed(Exception):
    """A streamed command's own input failed (a file vanished while packing): the machine is
    fine, so this is not retried as a connection error; ``SshPool.run`` raises the cause."""


async def _run_fed(
    conn: asyncssh.SSHClientConnection, command: str, source: StdinSource, timeout: float
) -> asyncssh.SSHCompletedProcess:
    """Run ``command`` with ``source``'s chunks as its stdin, each written when the channel
    takes it (asyncssh's drain), so nothing piles up in memory. ``timeout`` bounds the wait
    after the input ended; while it flows, a dead connection is found by its keepalives."""
    process = await conn.create_process(command, encoding=None)
    async with contextlib.aclosing(source()) as chunks:
        while True:
            try:
                chunk = await anext(chunks)
            except StopAsyncIteration:
                break
            except Exception as exc:
                process.close()  # the command sees its input cut short; its partial output is dropped
                raise InputFailed(str(exc)) from exc
            try:
                process.stdin.write(chunk)
                await process.stdin.drain()
            except (BrokenPipeError, ConnectionResetError):
                break  # the command stopped reading (it failed): its exit status and stderr say why
    if not process.stdin.is_closing():
        process.stdin.write_eof()
    return await process.wait(check=False, timeout=timeout)


#: Bytes read at a time from a command whose output goes to a file (a checkpoint's archive).
DOWNLOAD_CHUNK = 1024 * 1024


async def _run_to_file(
    conn: asyncssh.SSHClientConnection, command: str, path: Path, timeout: float
) -> asyncssh.SSHCompletedProcess:
    """Run ``command`` writing its stdout to ``path`` as it comes (a model of gigabytes never
    sits in memory); its stderr is returned as usual. A retried attempt writes it from the start."""
    process = await conn.create_process(command, encoding=None)
    with open(path, "wb") as out:
        while chunk := await process.stdout.read(DOWNLOAD_CHUNK):
            out.write(chunk)
    return await process.wait(check=False, timeout=timeout)


class SshPool:
    """Connections of this process, per event loop (asyncssh connections, locks and semaphores
    belong to a loop). Keyed by the loop object itself, weakly: a closed loop's id can be
    reused by a new loop, which must not inherit its dead connections."""

    def __init__(self) -> None:
        self._by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[SshTarget, _Connection]] = (
            weakref.WeakKeyDictionary()
        )

    def _slot(self, target: SshTarget, opener: ConnIdOpener | None) -> _Connection:
        conns = self._by_loop.setdefault(asyncio.get_running_loop(), {})
        if target not in conns:
            conns[target] = _Connection(target, opener)
        elif opener is not None:
            conns[target].opener = opener  # a platform that can open connection ids came later
        return conns[target]

    async def run(
        self,
        target: SshTarget,
        command: str,
        stdin: bytes | StdinSource | None = None,
        timeout: float = COMMAND_TIMEOUT,
        opener: ConnIdOpener | None = None,
        stdout_to: Path | None = None,
    ) -> tuple[int, bytes, bytes]:
        """(exit status, stdout, stderr) of ``command``; reconnects (with backoff) when the
        connection broke, and raises SshError when the machine stays unreachable. With
        ``stdout_to``, stdout goes to that file instead (and b"" is returned for it).

        A command may run again after a connection drop: every command trialflow sends is
        idempotent (launches are guarded by an atomic mkdir)."""
        import asyncssh
        import tenacity

        slot = self._slot(target, opener)
        broken = None  # the connection that failed: the next attempt replaces it

        async def once() -> tuple[int, bytes, bytes]:
            nonlocal broken
            conn = None
            try:
                conn = await slot.get(broken)
                broken = None
                async with slot.channels:
                    if stdout_to is not None:
                        result = await _run_to_file(conn, command, stdout_to, timeout)
                    elif callable(stdin):
                        result = await _run_fed(conn, command, stdin, timeout)
                    else:
                        result = await conn.run(command, input=stdin, encoding=None, timeout=timeout, check=False)
            except (
                asyncssh.HostKeyNotVerifiable,
                asyncssh.PermissionDenied,
                asyncssh.KeyImportError,
                asyncssh.KeyEncryptionError,
            ) as exc:
                raise SshError(describe_connect_error(target, exc)) from exc  # retrying cannot help
            except asyncssh.ChannelOpenError:
                # the server refused one more session now: try again, on this connection if it lives
                broken = conn if conn is not None and conn.is_closed() else None
                raise
            except InputFailed:
                raise  # the connection is fine
            except BaseException:
                broken = conn
                raise
            if result.exit_status is None and result.exit_signal is None:
                broken = conn
                raise ConnectionLost("the connection closed while running a command")
            status = result.exit_status if result.exit_status is not None else 128 + 15
            return status, _as_bytes(result.stdout), _as_bytes(result.stderr)

        transient = (OSError, asyncssh.Error, asyncio.TimeoutError, ConnectionLost)
        retrying = tenacity.AsyncRetrying(
            retry=tenacity.retry_if_exception_type(transient),
            wait=tenacity.wait_chain(*(tenacity.wait_fixed(d) for d in RECONNECT_DELAYS)),
            stop=tenacity.stop_after_attempt(len(RECONNECT_DELAYS) + 1),
            reraise=True,
            before_sleep=lambda state: log.info(
                "machine %s: %s; reconnecting (attempt %d)",
                target.label,
                state.outcome.exception() if state.outcome else None,
                state.attempt_number,
            ),
        )
        try:
            return await retrying(once)
        except InputFailed as exc:
            raise exc.__cause__ or exc from None  # the input's own error (a vanished file), unwrapped
        except SshError:
            raise
        except transient as exc:
            raise SshUnreachable(describe_connect_error(target, exc)) from exc

    async def close(self) -> None:
        conns = self._by_loop.pop(asyncio.get_running_loop(), {})
        for slot in conns.values():
            if slot.conn is not None:
                slot.conn.close()


POOL = SshPool()

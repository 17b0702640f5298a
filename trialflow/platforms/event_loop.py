"""One event loop thread per process for the platforms' synchronous calls.

Submit, cancel and cleanup are synchronous in the platform contract, while the
clients (asyncssh, kubernetes_asyncio) are async and keep connections per event
loop. Running every synchronous call on the same background loop lets those
calls share connections instead of opening one per call.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")

#: Threads for the platforms' blocking steps (a local launch waits for its wrapper's pid).
LAUNCH_THREADS = 32


class BackgroundLoop:
    def __init__(self, name: str = "trialflow-platforms") -> None:
        self._name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        with self._lock:
            if self._loop is None or self._loop.is_closed():
                self._loop = asyncio.new_event_loop()
                self._loop.set_default_executor(ThreadPoolExecutor(LAUNCH_THREADS, thread_name_prefix=self._name))
                threading.Thread(target=self._loop.run_forever, name=self._name, daemon=True).start()
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def forget(self) -> None:
        """In a forked child: the parent's loop thread is not there, so a call would wait for
        ever on a loop nobody runs; the next call starts one of the child's own."""
        self._loop = None
        self._lock = threading.Lock()


_BACKGROUND = BackgroundLoop()
os.register_at_fork(after_in_child=_BACKGROUND.forget)


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on the process's platform loop and wait for its result."""
    return _BACKGROUND.run(coro)

"""How long one copy into the artifact store may take before its follower goes on without it.

An object store that answers 500 keeps its SDK retrying for minutes (measured: ~3 minutes per
checkpoint against a store answering 500, an 8 s trial holding its worker slot for 5 min 48 s,
and a kill waiting behind it). The follower is what notices a kill, a deadline and the trial's
end, so it must not wait longer than a healthy copy takes: ``allowed_seconds`` grants a floor
plus a time per byte, and ``within`` runs the copy in a thread of its own and stops waiting
past it. Python cannot stop a thread: the copy goes on by itself until its SDK gives up or its
scratch folder is gone, and it cannot leave a half checkpoint behind (a checkpoint is one once
its manifest, written last, is there: trialflow.checkpoints.keeper). The thread is a daemon, so
a worker process that defers or ends does not wait for it either.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable
from typing import TypeVar

from trialflow.limits import COPY_BYTES_PER_SECOND, COPY_SECONDS_FLOOR
from trialflow.trial.folder import TrialFileRefused, files_in_folder

T = TypeVar("T")


class CopyTimedOut(TimeoutError):
    """The store did not take the copy within its time; the copy is not waited for."""


def folder_bytes(folder: str | os.PathLike[str], name: str) -> int:
    """The apparent size of the regular files of ``folder/name``, listed as the keeper lists
    them (trialflow.trial.folder.files_in_folder: bounded, no symlink followed, each entry
    refused by the same rule); 0 where that listing refuses or finds nothing, and the copy's
    own listing then says why."""
    try:
        return sum(size for _, size in files_in_folder(folder, name, refused=[]))
    except (TrialFileRefused, OSError):
        return 0


def allowed_seconds(size: int) -> float:
    """The time a copy of ``size`` bytes may take: the floor, and the rest at the slowest rate
    a working store gives (a 4 GiB checkpoint gets about 15 minutes)."""
    return COPY_SECONDS_FLOOR + max(size, 0) / COPY_BYTES_PER_SECOND


async def within(seconds: float, what: str, call: Callable[[], T]) -> T:
    """``call()`` in a daemon thread, its result or its exception; CopyTimedOut (naming
    ``what``) once ``seconds`` have passed without an answer."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()

    def settle(value: T | None, error: BaseException | None) -> None:
        if done.done():
            return  # given up on: nobody reads it
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(value)  # type: ignore[arg-type]

    def run() -> None:
        value: T | None = None
        error: BaseException | None = None
        try:
            value = call()
        except BaseException as exc:  # handed to the waiter, whatever it is
            error = exc
        try:
            loop.call_soon_threadsafe(settle, value, error)
        except RuntimeError:
            pass  # the loop is gone (the worker deferred or ended): nobody waits any more

    threading.Thread(target=run, name=f"trialflow-copy-{what}", daemon=True).start()
    try:
        return await asyncio.wait_for(done, seconds)  # cancels ``done`` when the time is up
    except TimeoutError:
        raise CopyTimedOut(f"the store did not take {what} within {seconds:.0f} s") from None

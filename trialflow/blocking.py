"""Blocking work from a trial's coroutines (store reads and writes, file reads, a trial's start),
run in threads of trialflow's own instead of the event loop's default executor.

In the triggerer every trigger shares one event loop, and ``asyncio.to_thread`` its default
executor: ``min(32, CPUs + 4)`` threads, six on a two-core machine. With fifty one-second
trials started and followed there, the starts, the follows' metric and status writes and the
look for free slots queued behind each other for those six (a start waited 0.65 s for a thread
to run 0.17 s of work, a look for slots came every 1.6 s instead of on each trial's end:
bench/RESULTS.md), and the slots stood empty.

Two pools, so that one can never wait on the other: a trial's start blocks on the platforms'
event loop (trialflow.platforms.event_loop.run_sync: the launch), and code on that loop may
itself hand blocking work to ``in_thread``; were starts in the same pool, enough of them at once
would hold every thread while the launch they wait for waits for one.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")

#: Threads for store reads and writes and file reads (short, never waiting on an event loop).
WORK_THREADS = 32
#: Threads for trials' starts (each waits for its launch on the platforms' event loop).
START_THREADS = 16

_WORK = ThreadPoolExecutor(WORK_THREADS, thread_name_prefix="trialflow-work")
_STARTS = ThreadPoolExecutor(START_THREADS, thread_name_prefix="trialflow-start")


def _fresh_pools() -> None:
    """A forked child has none of its parent's threads, but would inherit pools that count
    them as running, and work handed to them would never run (a follower process forked from
    one that had used the pools stored nothing: seen in CI): the child starts its own."""
    global _WORK, _STARTS
    _WORK = ThreadPoolExecutor(WORK_THREADS, thread_name_prefix="trialflow-work")
    _STARTS = ThreadPoolExecutor(START_THREADS, thread_name_prefix="trialflow-start")


os.register_at_fork(after_in_child=_fresh_pools)


async def in_thread(fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """``asyncio.to_thread`` in trialflow's work threads: the caller's context variables go
    along (Airflow's triggerer routes a trigger's log lines by them)."""
    return await _run(_WORK, fn, *args, **kwargs)


async def in_start_thread(fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """A trial's start (admission, the ask, the launch) in a thread of its own pool."""
    return await _run(_STARTS, fn, *args, **kwargs)


async def _run(pool: ThreadPoolExecutor, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
    return await asyncio.get_running_loop().run_in_executor(pool, call)

"""trialflow.blocking: a trial's blocking work runs in trialflow's own threads, with the caller's
context, and starts that wait on the platforms' loop never hold the threads that loop needs."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time

from trialflow import blocking
from trialflow.platforms.event_loop import run_sync

LABEL: contextvars.ContextVar[str] = contextvars.ContextVar("label", default="none")


def test_work_and_starts_run_in_their_own_pools_with_the_callers_context():
    async def main() -> tuple[tuple[str, str], tuple[str, str]]:
        LABEL.set("trigger 7")  # Airflow's triggerer routes a trigger's log lines by such variables

        def seen() -> tuple[str, str]:
            return threading.current_thread().name, LABEL.get()

        return await blocking.in_thread(seen), await blocking.in_start_thread(seen)

    (work_thread, work_label), (start_thread, start_label) = asyncio.run(main())
    assert work_thread.startswith("trialflow-work") and work_label == "trigger 7"
    assert start_thread.startswith("trialflow-start") and start_label == "trigger 7"


def test_more_starts_than_the_default_executor_has_threads_run_at_once():
    """Fifty trials asked at once in the triggerer: the default executor's six threads (two
    CPUs) made them queue; sixteen start together here. Every start waits at a barrier for all
    the others (a pool of fewer threads never fills it: the barrier breaks after its timeout),
    not a sleep that a loaded machine may outlast before the last thread is made."""
    barrier = threading.Barrier(blocking.START_THREADS, timeout=20)

    def start() -> bool:
        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            return False
        return True

    async def main() -> list[bool]:
        return await asyncio.gather(*(blocking.in_start_thread(start) for _ in range(blocking.START_THREADS)))

    assert all(asyncio.run(main()))


def test_starts_that_fill_their_pool_still_launch_through_the_platforms_loop():
    """Every start thread waits for a launch on the platforms' loop, and each launch hands
    work to ``in_thread``: with one pool for both, this would wait forever."""

    async def launch() -> str:
        return await blocking.in_thread(lambda: threading.current_thread().name)

    def start() -> str:
        time.sleep(0.05)  # all of them in their threads before the first launch ends
        return run_sync(launch())

    async def main() -> list[str]:
        calls = (blocking.in_start_thread(start) for _ in range(blocking.START_THREADS * 2))
        return await asyncio.wait_for(asyncio.gather(*calls), 30)

    names = asyncio.run(main())
    assert len(names) == blocking.START_THREADS * 2 and all(n.startswith("trialflow-work") for n in names)


def test_a_forked_child_runs_its_work_in_threads_of_its_own():
    """A follower process forked from one that had used the pools (and the platforms' loop)
    stored nothing: the child's work was handed to threads it does not have."""
    import multiprocessing

    async def use() -> str:
        return await blocking.in_thread(lambda: "done")

    assert asyncio.run(use()) == "done" and run_sync(use()) == "done"  # the parent's threads exist now

    def child(out) -> None:
        async def main() -> str:
            return await asyncio.wait_for(use(), 10) + " " + run_sync(use())

        out.put(asyncio.run(main()))

    context = multiprocessing.get_context("fork")
    out = context.Queue()
    process = context.Process(target=child, args=(out,))
    process.start()
    try:
        assert out.get(timeout=30) == "done done"
    finally:
        process.join(timeout=30)
        if process.is_alive():
            process.kill()

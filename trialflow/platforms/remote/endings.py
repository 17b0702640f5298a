"""Seeing a remote trial end within a fraction of a second, for every trial a process follows.

Each followed trial polls its machine once per ``poll_interval`` (1 s): with 200 trials
deferred to one triggerer, a trial's end was seen 1.38 s (median) before its task ended
(bench/remote_many.py), most of it the wait for the next poll. Here one loop per machine asks
every ``CHECK_INTERVAL`` which of the trials followed there have written their exit code, in
one SSH round trip for all of them (``ended_command``), and wakes their followers, which then
poll at once. Four machines cost four commands per interval, however many trials they run.

A loop ends when nobody waits on its machine; an SSH error ends nothing (the followers' own
polls see the machine's state and retry): the next wait starts a new loop.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Awaitable, Callable, Hashable

from trialflow.platforms.remote.commands import ended_command

log = logging.getLogger(__name__)

#: Seconds between two checks of a machine's followed trials.
CHECK_INTERVAL = 0.25
#: Trial folders per command (a command line stays well under the shells' limits).
DIRS_PER_COMMAND = 200

Run = Callable[[str], Awaitable[bytes]]


class MachineEndings:
    """The trials followed on one machine, in one event loop, and the loop that checks them."""

    def __init__(self, run: Run):
        self._run = run
        self._waiting: dict[str, set[asyncio.Event]] = {}
        self._task: asyncio.Task[None] | None = None

    async def wait(self, trial_dir: str, timeout: float) -> bool:
        """Until the trial's exit code is written (True) or ``timeout`` seconds pass (False)."""
        event = asyncio.Event()
        self._waiting.setdefault(trial_dir, set()).add(event)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._check())
        try:
            await asyncio.wait_for(event.wait(), timeout)
            return True
        except TimeoutError:
            return False
        finally:
            waiters = self._waiting.get(trial_dir)
            if waiters is not None:
                waiters.discard(event)
                if not waiters:
                    del self._waiting[trial_dir]

    async def _check(self) -> None:
        while self._waiting:
            dirs = sorted(self._waiting)
            for start in range(0, len(dirs), DIRS_PER_COMMAND):
                try:
                    out = await self._run(ended_command(dirs[start : start + DIRS_PER_COMMAND]))
                except Exception as exc:  # the followers' own polls report the machine's state
                    log.debug("checking for ended trials failed: %s", exc)
                    continue
                for line in out.decode("utf-8", "replace").splitlines():
                    for event in self._waiting.get(line, ()):
                        event.set()
            await asyncio.sleep(CHECK_INTERVAL)


#: Per event loop, per machine (its SSH target): the followers of one process share them.
_ENDINGS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[Hashable, MachineEndings]]
_ENDINGS = weakref.WeakKeyDictionary()


def endings_for(machine: Hashable, run: Run) -> MachineEndings:
    """The checker of ``machine`` for the running event loop (made at its first wait); ``run``
    runs a command there."""
    machines = _ENDINGS.setdefault(asyncio.get_running_loop(), {})
    found = machines.get(machine)
    if found is None:
        found = machines[machine] = MachineEndings(run)
    return found

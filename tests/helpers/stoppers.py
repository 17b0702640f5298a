"""A stopper that dies between a stop's two halves, for the tests of stops left half done
(trialflow.experiment.job_stops): the one stand-in there; the trials, jobs and stores are real."""

from __future__ import annotations

import asyncio


class StopperDies:
    """A platform whose stop never reaches it: the process running the stop died (its worker
    SIGKILLed 5 s after on_kill's SIGTERM, a triggerer killed) after the store's close. An
    interrupted stop ends in CancelledError, so that is what it raises."""

    async def cancel(self, handle, status, reason):
        raise asyncio.CancelledError

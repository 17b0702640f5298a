"""NNI's trial states. Every layer speaks them: the store records them, platforms map their own
states onto them with declarative tables, the pages show them."""

from __future__ import annotations

from enum import Enum


class TrialStatus(str, Enum):
    WAITING = "WAITING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    USER_CANCELED = "USER_CANCELED"
    SYS_CANCELED = "SYS_CANCELED"
    EARLY_STOPPED = "EARLY_STOPPED"

    @property
    def is_terminal(self) -> bool:
        return self not in (TrialStatus.WAITING, TrialStatus.RUNNING)


TERMINAL_STATUSES = frozenset(s for s in TrialStatus if s.is_terminal)
CANCEL_STATUSES = frozenset({TrialStatus.USER_CANCELED, TrialStatus.SYS_CANCELED, TrialStatus.EARLY_STOPPED})
#: Statuses whose final result, when the trial reported one, counts: for the tuner, the best,
#: sorting and the charts. An early stop that came after the trial had reported its final result
#: (the assessor judged while the result was on its way) keeps that result, as NNI keeps it.
COUNTED_STATUSES = frozenset({TrialStatus.SUCCEEDED, TrialStatus.EARLY_STOPPED})
#: The same, as the store and the pages write them.
COUNTED_STATUS_NAMES = frozenset(s.value for s in COUNTED_STATUSES)

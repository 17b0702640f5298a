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

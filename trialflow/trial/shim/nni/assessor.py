"""``nni.assessor.Assessor`` and ``AssessResult``, NNI's documented base for a customized
assessor (only loaded where the real nni is absent: see ``nni``). trialflow asks a subclass
``assess_trial(trial_job_id, trial_history)`` at each new intermediate result, as NNI's
dispatcher did, and tells it ``trial_end`` (trialflow.tuning.custom)."""

from enum import Enum
from typing import Any  # noqa: F401 (the type comments')

from .recoverable import Recoverable


class AssessResult(Enum):
    Good = True
    Bad = False


class Assessor(Recoverable):
    def assess_trial(self, trial_job_id, trial_history):  # type: (str, list[Any]) -> AssessResult
        raise NotImplementedError("Assessor: assess_trial not implemented")

    def trial_end(self, trial_job_id, success):  # type: (str, bool) -> None
        pass

    def _on_exit(self):  # type: () -> None
        pass

    def _on_error(self):  # type: () -> None
        pass

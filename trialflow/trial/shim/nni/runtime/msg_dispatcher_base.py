"""``nni.runtime.msg_dispatcher_base.MsgDispatcherBase``, NNI's base class for a customized
advisor, handler for handler (only loaded where the real nni is absent: see ``nni``).

NNI ran an advisor as its dispatcher: a loop reading commands from NNI's manager over a
websocket and handing them to these handlers, which answered with ``send``. trialflow calls the
handlers itself, one call at a time (trialflow.tuning.custom.host): ``handle_initialize`` with
the search space when the object is made, ``handle_request_trial_jobs(1)`` when a trial needs
parameters and none are waiting, ``handle_report_metric_data`` with each result and
``handle_trial_end`` when a trial ends. What the advisor sends is collected in ``OUTBOX`` and
read by the host: NewTrialJob's parameters go to the trials that ask, KillTrialJob stops that
trial early.
"""

from typing import Any  # noqa: F401 (the type comments')

from ..recoverable import Recoverable
from .tuner_command_channel import CommandType

#: What advisors sent during the current call, in order: (CommandType, data). The host empties it.
OUTBOX = []  # type: list[tuple[Any, Any]]


def send(command, data):  # type: (Any, Any) -> None
    """NNI's ``send``: here it is collected, for the host to read after the handler returns."""
    OUTBOX.append((command, data))


class MsgDispatcherBase(Recoverable):
    def __init__(self, command_channel_url=None):  # type: (str | None) -> None
        super().__init__()
        self.stopping = False

    def run(self):  # type: () -> None
        raise RuntimeError(
            "trialflow calls the advisor's handlers itself (trialflow.tuning.custom); there is no dispatcher loop"
        )

    def send(self, command, data):  # type: (Any, Any) -> None
        send(command, data)

    def report_error(self, error):  # type: (Any) -> None
        send(CommandType.Error, error)

    def handle_ping(self, data):  # type: (Any) -> None
        pass

    def handle_initialize(self, data):  # type: (Any) -> None
        raise NotImplementedError("handle_initialize not implemented")

    def handle_request_trial_jobs(self, data):  # type: (Any) -> None
        raise NotImplementedError("handle_request_trial_jobs not implemented")

    def handle_update_search_space(self, data):  # type: (Any) -> None
        raise NotImplementedError("handle_update_search_space not implemented")

    def handle_import_data(self, data):  # type: (Any) -> None
        raise NotImplementedError("handle_import_data not implemented")

    def handle_add_customized_trial(self, data):  # type: (Any) -> None
        raise NotImplementedError("handle_add_customized_trial not implemented")

    def handle_report_metric_data(self, data):  # type: (Any) -> None
        raise NotImplementedError("handle_report_metric_data not implemented")

    def handle_trial_end(self, data):  # type: (Any) -> None
        raise NotImplementedError("handle_trial_end not implemented")

"""NNI 1.x's ``nni.protocol`` (``CommandType`` and a module-level ``send``), as older customized
advisors import them; ``send`` is collected like ``MsgDispatcherBase.send``."""

from .runtime.msg_dispatcher_base import send
from .runtime.tuner_command_channel import CommandType

__all__ = ["CommandType", "send"]

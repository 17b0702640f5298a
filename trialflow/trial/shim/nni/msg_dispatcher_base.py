"""NNI 1.x's path of the advisor base class (``from nni.msg_dispatcher_base import
MsgDispatcherBase``), as older customized advisors import it."""

from .runtime.msg_dispatcher_base import MsgDispatcherBase

__all__ = ["MsgDispatcherBase"]

"""``import nni`` where NNI is not installed: trialflow's trial SDK answers for it.

Trial code written as NNI's docs say (``import nni; nni.get_next_parameter()``)
runs on any platform with nothing more installed: trialflow puts this folder on
the trial's PYTHONPATH beside its SDK. Where the real ``nni`` is installed it
wins: this module finds it further along ``sys.path`` and hands the import over,
so the trial gets NNI itself, exactly as before.

NNI's trial API is here (what trials call), and the base classes a customized
tuner, assessor or advisor subclasses (``nni.tuner``, ``nni.assessor``,
``nni.runtime.msg_dispatcher_base`` with its command names, ``nni.recoverable``,
``nni.utils``' helpers, ``nni.dump``/``nni.load``: trialflow.tuning.custom runs such
classes); NNI's own tuners, NAS and compression are NNI's and need the real package.
"""

import importlib.machinery
import os
import sys

#: ``import nni`` is every NNI trial's first line: it imports no ``typing`` (12 ms of a trial's
#: start) and no ``json`` (10 ms: trialflow.trial.lean_json), so the names of the type comments
#: exist for type checkers only.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any  # noqa: F401

_HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _real_nni():  # type: () -> importlib.machinery.ModuleSpec | None
    """The installed nni's spec, looked up on sys.path without this folder (None if absent)."""
    import importlib.machinery

    elsewhere = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    return importlib.machinery.PathFinder.find_spec("nni", elsewhere)


_spec = _real_nni()
if _spec is not None and _spec.loader is not None:
    import importlib.util

    _module = importlib.util.module_from_spec(_spec)
    sys.modules["nni"] = _module  # the import statement returns what sys.modules holds now
    _spec.loader.exec_module(_module)
else:
    try:
        import trialflow.trial as _sdk
    except ImportError:  # another interpreter than the worker's: the SDK root is three folders up
        sys.path.append(os.path.dirname(os.path.dirname(os.path.dirname(_HERE))))
        import trialflow.trial as _sdk

    # NNI's trial API, name for name: the SDK was written to it.
    __all__ = list(_sdk.__all__)
    globals().update({name: getattr(_sdk, name) for name in __all__})
    __version__ = "3.0+trialflow"

    from trialflow.trial import lean_json as _json

    def _plain(value):  # type: (Any) -> Any
        if hasattr(value, "item") and callable(value.item):  # NumPy's numbers
            return value.item()
        raise TypeError(f"{type(value).__name__} is not JSON")

    def dump(obj, fp=None, **kwargs):  # type: (Any, Any, Any) -> str | None
        """NNI's ``nni.dump`` for what an advisor sends (its parameters, a trial's id): JSON."""
        text = _json.dumps(obj, default=_plain)
        if fp is None:
            return text
        fp.write(text)
        return None

    def load(string=None, *, fp=None, **kwargs):  # type: (Any, Any, Any) -> Any
        """NNI's ``nni.load``: what ``dump`` wrote (and the metrics trialflow hands an advisor)."""
        return _json.loads(fp.read() if fp is not None else string)

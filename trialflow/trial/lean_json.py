"""JSON for the trial SDK without importing the ``json`` package.

Every trial's Python reads its parameters and writes its results as JSON, and importing
``json`` costs a trial process about 10 ms of CPU (its decoder imports ``re``, which imports
``enum`` and ``functools``): 13 ms for a bare interpreter, 23 with it, measured on the 2-core
bench machine. At a thousand one-second trials that is a tenth of what trialflow may spend
on each (bench/RESULTS.md, issue 67). The package's own work is done by its C accelerator,
``_json``, which imports nothing; this module calls it the way ``json.loads`` and
``json.dumps`` do with their default arguments, so the text read and written is the same
(tests/trial/test_lean_json.py compares them).

Only the calm path is lean: where ``_json`` is missing (another interpreter) or its calling
convention changed, and for every document the accelerator does not accept whole, the
``json`` package is imported and answers, so an error is ``json``'s own error, word for word.
CPython's private module stays behind this one file.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

#: JSON's whitespace (``json.decoder.WHITESPACE`` without its regular expression).
_WHITESPACE = " \t\n\r"


class _Context:
    """What ``_json.make_scanner`` reads from a ``json.JSONDecoder``, with its defaults."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int

    @staticmethod
    def parse_constant(name: str) -> float:
        return {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}[name]


def _scanner() -> Callable[[str, int], tuple[Any, int]] | None:
    try:
        from _json import make_scanner

        return make_scanner(_Context())  # type: ignore[arg-type]  # typeshed types the context as a scanner
    except (ImportError, TypeError, AttributeError):
        return None


_scan = _scanner()


def loads(text: str) -> Any:
    """``json.loads(text)``."""
    if _scan is not None and isinstance(text, str):
        start = len(text) - len(text.lstrip(_WHITESPACE))
        try:
            value, end = _scan(text, start)
        except Exception:  # json answers below, with its own error
            # Not only StopIteration and JSONDecodeError: _json raises its errors through
            # json.decoder, which it finds only if imported, and raises SystemError when it is
            # not (CPython 3.11: "returned NULL without setting an exception").
            value, end = None, -1
        if end >= 0 and not text[end:].strip(_WHITESPACE):
            return value
    import json

    return json.loads(text)


def dumps(value: object, default: Callable[[Any], Any] | None = None) -> str:
    """``json.dumps(value, default=default)``: ASCII only, NaN and Infinity written as
    JavaScript's names, ``", "`` and ``": "`` between items, circular references refused."""
    try:
        from _json import encode_basestring_ascii, make_encoder

        encode = make_encoder({}, default or _refuse, encode_basestring_ascii, None, ": ", ", ", False, False, True)
    except (ImportError, TypeError, AttributeError):
        import json

        return json.dumps(value, default=default)
    if isinstance(value, str):
        return encode_basestring_ascii(value)
    return "".join(encode(value, 0))


def _refuse(obj: object) -> object:
    raise TypeError(f"Object of type {obj.__class__.__name__} is not JSON serializable")

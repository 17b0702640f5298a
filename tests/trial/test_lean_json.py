"""The SDK's JSON (trialflow.trial.lean_json) reads and writes what ``json`` does, errors included."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from trialflow.trial import lean_json

VALUES = [
    0,
    -1,
    10**40,
    -(10**40),
    0.1,
    1e308,
    5e-324,
    -0.0,
    float("nan"),
    float("inf"),
    float("-inf"),
    True,
    False,
    None,
    "",
    "plain",
    'quote " backslash \\ newline \n tab \t',
    "é ü 中文 \u2028 \U0001f600",
    "\x00\x1f",
    [],
    {},
    [1, [2, [3, [4]]]],
    {"parameter_id": 3, "parameters": {"x": 0.5, "layers": [64, 32], "act": "relu", "on": True}},
    {"default": 0.9, "loss": float("nan")},
    (1, 2),
    {1: "int key", 2.5: "float key", False: "bool key", None: "null key"},
]


def same(a: object, b: object) -> bool:
    """Equal, with NaN equal to NaN, and the same types all the way down."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)  # type: ignore[index]
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))  # type: ignore[arg-type]
    return a == b


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_writes_what_json_writes_and_reads_it_back_as_json_does(value):
    text = lean_json.dumps(value)
    assert text == json.dumps(value)
    assert same(lean_json.loads(text), json.loads(text))
    assert same(lean_json.loads(f" \n\t{text}\r\n "), json.loads(text))


@pytest.mark.parametrize(
    "text",
    ["", "   ", "{", "[1,]", "1 2", "{} x", "\ufeff{}", "nan", "{'a': 1}", '{"a": 1,}', '"\x01"', "01", "-", "1e"],
    ids=repr,
)
def test_a_document_json_refuses_raises_json_s_own_error(text):
    """In a trial's own interpreter, where nothing imported ``json`` (here pytest has: _json
    finds json.decoder and raises its error; in a trial it raised SystemError instead)."""
    with pytest.raises(json.JSONDecodeError) as expected:
        json.loads(text)
    code = (
        "import sys\n"
        "from trialflow.trial import lean_json\n"
        "assert 'json' not in sys.modules\n"
        "try:\n"
        "    lean_json.loads(sys.argv[1])\n"
        "except Exception as exc:\n"
        "    import json\n"
        "    print(json.dumps([type(exc).__name__, getattr(exc, 'msg', str(exc)), getattr(exc, 'pos', None)]))\n"
    )
    result = subprocess.run([sys.executable, "-c", code, text], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == ["JSONDecodeError", expected.value.msg, expected.value.pos]


def test_nesting_too_deep_for_the_interpreter_fails_as_json_does():
    text = "[" * 100_000 + "]" * 100_000
    with pytest.raises(RecursionError):
        json.loads(text)
    with pytest.raises(RecursionError):
        lean_json.loads(text)


def test_a_value_json_cannot_write_is_refused_the_same_way_unless_default_converts_it():
    class Scalar:  # what numpy's and torch's scalars look like to the SDK
        def __float__(self) -> float:
            return 0.25

    with pytest.raises(TypeError, match="Object of type Scalar is not JSON serializable"):
        lean_json.dumps({"v": Scalar()})
    assert lean_json.dumps({"v": Scalar()}, default=float) == json.dumps({"v": Scalar()}, default=float)
    loop: list[object] = []
    loop.append(loop)
    with pytest.raises(ValueError, match="Circular reference"):
        lean_json.dumps(loop)


def test_without_the_accelerator_the_json_package_answers():
    code = (
        "import sys; sys.modules['_json'] = None\n"
        "from trialflow.trial import lean_json\n"
        "assert lean_json._scan is None\n"
        "print(lean_json.dumps({'x': float('nan'), 'y': [1, 'é']}), lean_json.loads(' [1, 2.5] '))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ['{"x":', "NaN,", '"y":', "[1,", '"\\u00e9"]}', "[1,", "2.5]"]

from __future__ import annotations

import json
import math

import pytest

from trialflow.trial.protocol import (
    MetricFormatError,
    frame,
    metric_record,
    parse_record,
    read_framed,
    read_state_file,
    read_stdout_lines,
    scalar,
    stdout_line,
    write_parameter_file,
)

# The exact bytes nni 3.0 writes for one intermediate result (nni-protocol.md).
NNI_BYTES = (
    b'ME000098{"parameter_id": 7, "trial_job_id": "Xy12Z", "type": "PERIODICAL", "sequence": 0, "value": "0.5"}\n'
)


def _pair(read):
    return read.metrics, read.consumed


def test_frame_matches_nni_bytes():
    record = metric_record("Xy12Z", 7, "PERIODICAL", 0, 0.5)
    assert frame(record) == NNI_BYTES


def test_reads_nni_bytes():
    metrics, consumed = _pair(read_framed(NNI_BYTES))
    assert consumed == len(NNI_BYTES)
    (m,) = metrics
    assert (m.type, m.sequence, m.value, m.parameter_id, m.trial_job_id) == ("PERIODICAL", 0, 0.5, 7, "Xy12Z")


def test_length_counts_bytes_not_characters():
    data = frame(metric_record("t", 1, "FINAL", 0, {"default": 1.0, "note": "ünïcødé ✓"}))
    assert int(data[2:8]) == len(data) - 8
    (m,), _ = _pair(read_framed(data))
    assert m.value["note"] == "ünïcødé ✓"


@pytest.mark.parametrize("cut", [1, 5, 8, 9, 50, len(NNI_BYTES) - 1])
def test_partial_tail_is_kept_for_the_next_read(cut):
    data = NNI_BYTES + NNI_BYTES
    first, consumed = _pair(read_framed(data[: len(NNI_BYTES) + cut]))
    assert len(first) == 1 and consumed == len(NNI_BYTES)
    rest, consumed2 = _pair(read_framed(data[consumed:]))
    assert len(rest) == 1 and consumed + consumed2 == len(data)


def test_incremental_reading_from_a_cursor_sees_each_record_once():
    stream = b"".join(frame(metric_record("t", 0, "PERIODICAL", i, i)) for i in range(50))
    offset, seen = 0, []
    for end in range(0, len(stream) + 1, 37):  # arbitrary chunking, like a file being appended
        metrics, consumed = _pair(read_framed(stream[offset:end]))
        seen.extend(m.value for m in metrics)
        offset += consumed
    metrics, consumed = _pair(read_framed(stream[offset:]))
    seen.extend(m.value for m in metrics)
    assert seen == list(range(50))


def test_nan_and_infinity_as_json_tricks_writes_them():
    raw = b'{"parameter_id": 1, "trial_job_id": "t", "type": "FINAL", "sequence": 0, "value": "NaN"}\n'
    (m,), _ = _pair(read_framed(b"ME%06d" % len(raw) + raw))
    assert math.isnan(m.value)
    data = frame(metric_record("t", 1, "PERIODICAL", 0, float("-inf")))
    (m,), _ = _pair(read_framed(data))
    assert m.value == float("-inf")


def test_garbage_is_skipped_and_said_never_guessed():
    read = read_framed(b"XX000010whatever.." + NNI_BYTES)
    assert [m.value for m in read.metrics] == [0.5] and read.consumed == 18 + len(NNI_BYTES)
    assert len(read.skipped) == 1 and "not a metric frame" in read.skipped[0]
    read = read_framed(b"ME000003{x\n")
    assert read.metrics == [] and read.consumed == 11 and "malformed metric record" in read.skipped[0]
    with pytest.raises(MetricFormatError):
        parse_record(b"{x")


def test_stdout_lines_between_other_output():
    record = metric_record("t", 2, "PERIODICAL", 3, {"default": 0.25})
    out = (
        "epoch 1\n"
        + stdout_line(record)
        + "loss=0.3\n"
        + stdout_line(metric_record("t", 2, "FINAL", 0, 0.9))
        + "NNISDK_MEb'{\"partial"
    ).encode()
    metrics, consumed = _pair(read_stdout_lines(out))
    assert [(m.type, m.value) for m in metrics] == [("PERIODICAL", {"default": 0.25}), ("FINAL", 0.9)]
    assert out[consumed:] == b"NNISDK_MEb'{\"partial"


def test_nni_stdout_line_format():
    # nni 3.0 prints: NNISDK_MEb'<json>' (a literal b' prefix, no length)
    line = stdout_line(metric_record("t", 0, "FINAL", 0, 1))
    assert line.startswith("NNISDK_MEb'{") and line.endswith("}'\n")
    assert json.loads(line[len("NNISDK_MEb'") : -2])["value"] == "1"


@pytest.mark.parametrize(
    "value, expected",
    [(1, 1.0), (0.5, 0.5), ({"default": 2, "x": 1}, 2.0), ({"x": 1}, None), ("a", None), (True, None), (None, None)],
)
def test_scalar_is_nnis_extract_scalar_reward(value, expected):
    assert scalar(value) == expected


def test_parameter_file_is_nnis_format(tmp_path):
    write_parameter_file(tmp_path, 7, {"lr": 0.1, "opt": {"_name": "sgd"}})
    assert json.loads((tmp_path / "parameter.cfg").read_text()) == {
        "parameter_id": 7,
        "parameter_source": "algorithm",
        "parameters": {"lr": 0.1, "opt": {"_name": "sgd"}},
        "parameter_index": 0,
    }
    assert not list(tmp_path.glob("*.tmp"))


def test_state_file(tmp_path):
    assert read_state_file(tmp_path) is None
    (tmp_path / ".nni").mkdir()
    state = tmp_path / ".nni" / "state"
    # the wrapper's echo seen mid-write: opened (empty), or cut short ("1" of "12 ...")
    for partial in ("", "1", "12 17000"):
        state.write_text(partial)
        assert read_state_file(tmp_path) is None, partial
    state.write_text("12 1700000000000\n")
    assert read_state_file(tmp_path) == 12
    state.write_text("3 \n")  # a bash without EPOCHREALTIME writes no time
    assert read_state_file(tmp_path) == 3
    # not the wrapper's line: the trial's own code wrote there (its output folder)
    for foreign in ("oops\n", "1.5 x\n", "\n"):
        state.write_text(foreign)
        assert read_state_file(tmp_path) is None, foreign
    state.write_bytes(b"\xff\xfe\n")
    assert read_state_file(tmp_path) is None


def test_the_current_handle_is_the_later_attempts():
    from trialflow.trial.handle import current_handle

    first = {"platform": "local", "trial_id": "t", "pid": 1}
    restarted = {"platform": "local", "trial_id": "t", "pid": 2, "attempt": 1}
    assert current_handle(first, restarted) is restarted
    assert current_handle(restarted, first) is restarted  # an older stored one never wins
    assert current_handle(first, None) is first and current_handle(first, dict(first)) is first

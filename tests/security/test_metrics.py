"""Malformed metrics never crash the follower or lose the good results around them; an
over-long output line never stalls reading; a non-finite or non-numeric final result is
refused with a message that says what was wrong."""

from __future__ import annotations

import asyncio
import json
import shlex
import sys
from pathlib import Path

import pytest

from tests.helpers.remote import machine_entry, remote_platform
from trialflow.config.model import AlgorithmConfig
from trialflow.config.platforms import LocalConfig
from trialflow.config.search_space import parse_search_space
from trialflow.experiment.follow import follow_trial
from trialflow.platforms.base import TrialSpec, TrialStatus
from trialflow.platforms.local import LocalPlatform
from trialflow.store.experiment_store import ExperimentStore, sqlite_url
from trialflow.trial.protocol import (
    MAX_STDOUT_LINE,
    Metric,
    frame,
    metric_record,
    read_framed,
    read_stdout_lines,
    stdout_line,
)
from trialflow.tuning.asker import ask

PY = sys.executable
SPACE = parse_search_space({"x": {"_type": "uniform", "_value": [0, 1]}})
RANDOM = AlgorithmConfig(name="Random")


def record(kind: str, seq: int, value: object) -> dict:
    return metric_record("t", 0, kind, seq, value)


def raw_frame(text: str) -> bytes:
    data = text.encode()
    return b"ME%06d" % len(data) + data


BAD_RECORDS = {
    "not json": raw_frame("not json\n"),
    "a list": raw_frame("[1, 2]\n"),
    "no value": raw_frame('{"type": "FINAL", "sequence": 0}\n'),
    "value not json": raw_frame('{"type": "FINAL", "sequence": 0, "value": "{oops"}\n'),
    "sequence 1e400": raw_frame('{"type": "PERIODICAL", "sequence": 1e400, "value": "1"}\n'),
    "negative sequence": raw_frame('{"type": "PERIODICAL", "sequence": -1, "value": "1"}\n'),
    "huge sequence": raw_frame('{"type": "PERIODICAL", "sequence": 99999999999999, "value": "1"}\n'),
    "unknown type": raw_frame('{"type": "REQUEST_PARAMETER", "sequence": 0, "value": "1"}\n'),
    "deep value": raw_frame('{"type": "PERIODICAL", "sequence": 0, "value": "' + "[" * 100_000 + '"}\n'),
    "not utf-8": b"ME000004\xff\xfe\n\n",
    "garbage line": b"this is not a frame\n",
}


@pytest.mark.parametrize("case", sorted(BAD_RECORDS))
def test_a_bad_record_in_the_metrics_file_is_skipped_and_its_neighbours_kept(case):
    before = frame(record("PERIODICAL", 0, 0.25))
    after = frame(record("FINAL", 0, 0.75))
    read = read_framed(before + BAD_RECORDS[case] + after, final=True)
    assert [m.value for m in read.metrics] == [0.25, 0.75]
    assert len(read.skipped) == 1 and read.consumed == len(before + BAD_RECORDS[case] + after)


@pytest.mark.parametrize(
    "line",
    [
        "NNISDK_MEb'not json'\n",
        'NNISDK_MEb\'{"type": "FINAL", "sequence": 1e400, "value": "1"}\'\n',
        'NNISDK_MEb\'{"type": "FINAL", "sequence": 0}\'\n',
    ],
)
def test_a_bad_stdout_line_is_skipped_and_its_neighbours_kept(line):
    data = (stdout_line(record("PERIODICAL", 0, 1)) + line + stdout_line(record("FINAL", 0, 2))).encode()
    read = read_stdout_lines(data)
    assert [m.value for m in read.metrics] == [1, 2] and len(read.skipped) == 1 and read.consumed == len(data)


def test_garbage_that_hides_a_frame_is_resynchronised():
    good = frame(record("FINAL", 0, 0.5))
    read = read_framed(b"junk without newline" + good)
    assert [m.value for m in read.metrics] == [0.5]
    # a header claiming more bytes than ever come: waits while the trial runs, skipped at its end
    stuck = b"ME999999{" + good
    assert read_framed(stuck).metrics == []
    assert [m.value for m in read_framed(stuck, final=True).metrics] == [0.5]


def test_an_overlong_line_is_skipped_chunk_by_chunk_and_reading_goes_on():
    """A 5 MB output line before the final metric, read in 4 MB chunks as remote and mounted
    storage do: the offset always moves, and the final metric is found."""
    stream = b"x" * (5 * 1024 * 1024) + b"\n" + stdout_line(record("FINAL", 0, 0.9)).encode()
    offset, long_line, found, skipped = 0, False, [], []
    for _ in range(10):
        chunk = stream[offset : offset + 4 * 1024 * 1024]
        read = read_stdout_lines(chunk, in_long_line=long_line)
        assert read.consumed > 0 or offset == len(stream)
        offset, long_line = offset + read.consumed, read.in_long_line
        found += read.metrics
        skipped += read.skipped
        if offset == len(stream):
            break
    assert [m.value for m in found] == [0.9] and len(skipped) == 1 and "longer than" in skipped[0]
    assert MAX_STDOUT_LINE < 4 * 1024 * 1024


def test_a_last_line_without_newline_is_read_when_the_trial_ended():
    data = stdout_line(record("FINAL", 0, 3)).rstrip("\n").encode()
    assert read_stdout_lines(data).metrics == []
    assert [m.value for m in read_stdout_lines(data, final=True).metrics] == [3]


# -- through the follow loop and the store, with real trial processes -----------------------

TRIAL = """\
import json, os, sys
from trialflow import trial
p = trial.get_next_parameter()
trial.report_intermediate_result(0.25)
with open(os.path.join(os.environ["NNI_SYS_DIR"], ".nni", "metrics"), "ab") as f:
    f.write(sys.argv[1].encode().decode("unicode_escape").encode("latin-1"))
trial.report_intermediate_result(0.5)
final = json.loads(sys.argv[2])
trial.report_final_result(10**400 if final == "huge" else final)
"""


@pytest.fixture
def run_trial(tmp_path: Path):
    code = tmp_path / "code"
    code.mkdir()
    (code / "t.py").write_text(TRIAL)
    store = ExperimentStore(sqlite_url(tmp_path / "store.db"))
    store.open_experiment("emetrics")
    study = "emetrics"
    platform = LocalPlatform(LocalConfig(), tmp_path / "work")
    platform.prepare_sync("emetrics")
    counter = iter(range(100))

    def run(garbage: str, final: object, before: str = "") -> tuple[TrialStatus, dict, str | None]:
        index = next(counter)
        asked = ask(store, study, index, f"emetrics-{index:04d}", RANDOM, SPACE)
        command = before + f"{PY} t.py {shlex.quote(garbage)} {shlex.quote(json.dumps(final))}"
        spec = TrialSpec("emetrics", f"emetrics-{index:04d}", index, index, asked.parameters, command, code)
        handle = platform.submit_sync(spec)
        outcome = asyncio.run(follow_trial(platform, store, handle, asked.storage_id, poll_interval=0.05))
        store.close(asked.storage_id, outcome.status, outcome.message)
        frozen = store.storage.get_trial(asked.storage_id)
        return outcome.status, frozen, frozen.user_attrs.get("message")

    return run


def test_garbage_in_the_metrics_file_costs_nothing_but_a_warning(run_trial, caplog):
    status, frozen, message = run_trial("garbage line\\n", 0.8)
    assert status == TrialStatus.SUCCEEDED and frozen.state.name == "COMPLETE" and frozen.value == 0.8
    assert frozen.intermediate_values == {0: 0.25, 1: 0.5}
    assert "1 metric record skipped (first: bytes that are not a metric frame" in message
    assert any("skipped bytes that are not a metric frame" in r.message for r in caplog.records)


@pytest.mark.parametrize(
    "final, expected",
    [
        ("huge", "is not a finite number"),
        ("text", "the final result is a string ('text'), not a number"),
        ({"loss": 0.1}, "a dict without a 'default' key (keys: loss)"),
        ({"default": "high"}, "'default' is 'high', not a number"),
        (None, "no final result reported"),
    ],
)
def test_a_final_result_that_is_not_a_number_says_what_it_was(run_trial, final, expected):
    status, frozen, message = run_trial("", final)
    assert status == TrialStatus.SUCCEEDED and frozen.state.name == "FAIL"
    assert expected in message, message


def test_an_overlong_stdout_line_on_a_remote_machine_does_not_stall_metrics(ssh_servers, tmp_path):
    """The real remote poll: a 5 MB line before the final result (read chunk: 4 MB)."""
    a, _ = ssh_servers
    code = tmp_path / "code"
    code.mkdir()
    (code / "t.py").write_text(
        "import sys\nfrom trialflow import trial\ntrial.get_next_parameter()\n"
        "trial.report_intermediate_result(1)\nsys.stdout.write('y' * (5 * 1024 * 1024) + '\\n')\n"
        "trial.report_intermediate_result(2)\ntrial.report_final_result(3)\n"
    )
    platform = remote_platform(tmp_path, [machine_entry(a, "key")])
    platform.prepare_sync("elongln1")
    spec = TrialSpec("elongln1", "elongln1-0000", 0, 0, {"x": 1}, "python3 t.py", code)
    handle = platform.submit_sync(spec)

    async def follow() -> tuple[TrialStatus, list, list]:
        cursor: dict = {}
        metrics, skipped = [], []
        for _ in range(600):
            update = await platform.poll(handle, cursor)
            metrics += update.metrics
            skipped += update.skipped
            cursor = update.cursor
            if update.status.is_terminal:
                return update.status, metrics, skipped
            await asyncio.sleep(0.1)
        raise TimeoutError

    status, metrics, skipped = asyncio.run(follow())
    assert status == TrialStatus.SUCCEEDED
    assert [m.value for m in metrics] == [1, 2, 3] and len(skipped) == 1


@pytest.mark.parametrize("line", ["oops", "0.5 done", r"\xff\xfe"])
def test_a_trial_writing_over_its_exit_code_file_is_followed_to_its_real_end(run_trial, line):
    """.nni/state (the wrapper's exit code) is in the trial's output folder, where its code
    writes too: a line there that is not the wrapper's is no exit code, polled for a second
    while the trial runs on, and the wrapper's own line decides once it ends."""
    before = f'mkdir -p "$NNI_OUTPUT_DIR/.nni" && printf "{line}\\n" > "$NNI_OUTPUT_DIR/.nni/state" && sleep 1 && '
    status, frozen, message = run_trial("", 0.7, before)
    assert status == TrialStatus.SUCCEEDED and frozen.state.name == "COMPLETE" and frozen.value == 0.7, message
    assert frozen.intermediate_values == {0: 0.25, 1: 0.5}


UNCOUNTED = """\
from trialflow import trial
trial.get_next_parameter()
for value in (float("nan"), float("inf"), "text", {"loss": 1}, 0.5):
    trial.report_intermediate_result(value)
trial.report_final_result(0.9)
trial.report_final_result(0.1)
"""


def test_results_that_are_not_counted_are_said_in_the_message(tmp_path, store):
    """Intermediate results that are not finite numbers stay off the curve and the assessor, and
    a second final result is ignored (NNI keeps the first): each is counted in the message,
    never dropped without a word."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "t.py").write_text(UNCOUNTED)
    store.open_experiment("euncount")
    platform = LocalPlatform(LocalConfig(), tmp_path / "work")
    platform.prepare_sync("euncount")
    asked = ask(store, "euncount", 0, "euncount-0000", RANDOM, SPACE)
    spec = TrialSpec("euncount", "euncount-0000", 0, 0, asked.parameters, f"{PY} t.py", code)
    handle = platform.submit_sync(spec)
    outcome = asyncio.run(follow_trial(platform, store, handle, asked.storage_id, poll_interval=0.05))
    record = store.close(asked.storage_id, outcome.status, outcome.message)
    frozen = store.storage.get_trial(asked.storage_id)
    assert outcome.status == TrialStatus.SUCCEEDED and frozen.value == 0.9 and record.final == 0.9
    assert frozen.intermediate_values == {4: 0.5}
    message = record.message or ""
    assert message.startswith("5 metric records skipped (first: intermediate result 0 ('nan') is not a finite"), message
    # reading the same records again (a cursor lost in a restart) counts nothing twice
    assert store.record_metrics(asked.storage_id, [Metric("FINAL", 0, 0.9)]) == []
    assert (
        "a second final result (0.1) was ignored"
        in store.record_metrics(asked.storage_id, [Metric("FINAL", 0, 0.1)])[0]
    )

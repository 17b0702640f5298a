"""CSV export against formula injection that hides behind a carriage return, a space or a
full-width sign; JSON export keeps every value exactly."""

from __future__ import annotations

import csv
import io

import pytest

from trialflow import queries
from trialflow.config.model import AlgorithmConfig
from trialflow.config.search_space import parse_search_space
from trialflow.platforms.base import TrialStatus
from trialflow.tuning.asker import ask

HOSTILE = [
    "\r=cmd|' /C calc'!A0",
    "\n=1+1",
    " =1+1",
    "\t=1+1",
    "\u3000=1+1",  # ideographic space
    "\uff1d1+1",  # full-width =
    "\uff0bcmd",  # full-width +
    "\u200b=1+1",  # zero-width space (format character)
    '=HYPERLINK("http://x")',
    "@SUM(A1)",
    "-3+cmd",
]
SAFE = ["relu", "a=b", "1e-3", "ünï", 'x"y']


@pytest.mark.parametrize("value", HOSTILE)
def test_every_formula_start_is_guarded(value):
    assert queries.spreadsheet_safe(value) == "'" + value


@pytest.mark.parametrize("value", SAFE)
def test_plain_text_is_left_alone(value):
    assert queries.spreadsheet_safe(value) == value


def test_a_csv_export_keeps_one_row_per_trial_and_json_keeps_values(tmp_path, store):
    values = HOSTILE + SAFE
    space = parse_search_space({"act": {"_type": "choice", "_value": values}})
    grid = AlgorithmConfig(name="GridSearch")
    store.open_experiment("eexport1")
    for index in range(len(values)):
        asked = ask(store, "eexport1", index, f"eexport1-{index:04d}", grid, space)
        store.finish(asked.storage_id, TrialStatus.SUCCEEDED, 0.5)
    engine = store.storage.engine
    text = queries.export_csv(engine, "eexport1")
    rows = list(csv.DictReader(io.StringIO(text, newline="")))
    assert len(rows) == len(values)  # no value started a row of its own
    seen = sorted(r["param:act"] for r in rows)
    assert seen == sorted(queries.spreadsheet_safe(v) for v in values)
    assert "\"'\r=cmd" in text  # inside quotes: the carriage return is the cell's, not a row end
    exported = queries.export_json(engine, "eexport1")
    assert sorted(t["parameters"]["act"] for t in exported) == sorted(values)

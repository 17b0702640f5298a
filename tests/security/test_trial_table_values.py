"""Odd values in a trial's stored parameters (what a hand-edited store or another writer may
leave: NaN, infinities, a number past a float, booleans, lists, objects without a name): the
trial table sorts by them and every page that shows them can be sent as JSON, where a NaN was
a malformed-JSON error from SQLite for the whole sorted table and a 500 for every page holding
the trial (SQLite and PostgreSQL)."""

from __future__ import annotations

import json

import pytest
import sqlalchemy as sa
from starlette.responses import JSONResponse

from tests.helpers.filled_store import fill
from trialflow import queries
from trialflow.queries import settled
from trialflow.queries.parameter_columns import sort_value
from trialflow.queries.tables import decoded, study_id_of

pytestmark = pytest.mark.both_databases

ODD = {
    0: "NaN",  # written raw below: json.dumps(float("nan"))
    1: 10**400,
    2: -(10**400),
    3: True,
    4: False,
    5: [1, 2],
    6: {"alpha": 1},  # a nested choice without its _name
    7: 0.5,
}


def _write(engine: sa.Engine, index: int, text: str) -> None:
    with engine.begin() as conn:
        sid = study_id_of(conn, "eq000001")
        conn.execute(
            sa.text(
                "UPDATE trial_user_attributes SET value_json = :v WHERE key = 'parameters' AND trial_id = "
                "(SELECT trial_id FROM trialflow_trial_index WHERE study_id = :s AND trial_index = :i)"
            ),
            {"v": text, "s": sid, "i": index},
        )


def test_a_parameters_odd_values_sort_and_every_page_holding_them_renders(store):
    fill(store)
    engine = store.storage.engine
    settled._stores.pop(str(engine.url), None)
    for index, value in ODD.items():
        _write(engine, index, '{"v": NaN, "w": Infinity}' if index == 0 else json.dumps({"v": value}))
    page = queries.trials_page(engine, "eq000001", sort="param:v", limit=100)
    # numbers (-huge as -inf, 0.5, +huge as +inf), then texts by code point (NaN, false, true),
    # then no value (a list, an object without _name)
    assert [r["trial_index"] for r in page["rows"]] == [2, 7, 1, 0, 4, 3, 5, 6]
    descending = queries.trials_page(engine, "eq000001", sort="param:v", descending=True, limit=100)
    assert [r["trial_index"] for r in descending["rows"]] == [1, 7, 2, 3, 4, 0, 5, 6]
    nan_row = next(r for r in page["rows"] if r["trial_index"] == 0)
    assert nan_row["parameters"] == {"v": "NaN", "w": "Infinity"}  # shown as stored
    for answer in (
        page,
        queries.trials_page(engine, "eq000001", search="nan", limit=100),
        queries.trial_detail(engine, "eq000001", 0),
        queries.chart_data(engine, "eq000001").as_dict(),
    ):
        JSONResponse(answer)  # what the routes send: allow_nan=False, a ValueError (a 500) before
    settled._stores.pop(str(engine.url), None)


def test_sort_value_reads_each_kind_as_the_table_orders_it():
    assert sort_value({"v": 3}, "v") == (3.0, None)
    assert sort_value({"v": 10**400}, "v") == (float("inf"), None)
    assert sort_value({"v": float("nan")}, "v") == (None, "NaN")
    assert sort_value({"v": True}, "v") == (None, "true")
    assert sort_value({"v": "x"}, "v") == (None, "x")
    assert sort_value({"v": {"_name": "sgd", "m": 0.5}}, "v") == (None, "sgd")
    assert sort_value({"v": {"_name": "sgd", "m": 0.5}}, "v/m") == (0.5, None)
    assert sort_value({"a/b": 2}, "a/b") == (2.0, None)  # a name with a slash, whole first
    assert sort_value({"v": [1]}, "v") == (None, None)
    assert sort_value(None, "v") == (None, None)
    assert sort_value("not an object", "v") == (None, None)
    assert decoded('{"a": NaN, "b": -Infinity}') == {"a": "NaN", "b": "-Infinity"}

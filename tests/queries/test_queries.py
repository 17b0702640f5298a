"""The read models behind the pages and the CLI, on a real store (SQLite and PostgreSQL)."""

from __future__ import annotations

import csv
import io
import json
import math

import pytest
import sqlalchemy as sa

from tests.helpers.filled_store import RANDOM, SPACE, fill
from trialflow import queries
from trialflow.config.model import AlgorithmConfig
from trialflow.config.search_space import parse_search_space
from trialflow.platforms.base import TrialStatus
from trialflow.trial.protocol import Metric
from trialflow.tuning.asker import ask

#: Every test that takes ``store`` runs on SQLite and on PostgreSQL.
pytestmark = pytest.mark.both_databases


def test_experiment_list_counts_best_and_times(store):
    fill(store)
    store.open_experiment("not-ours")  # a plain Optuna study in the same database
    (row,) = queries.list_experiments(store.storage.engine)
    assert row.experiment_id == "eq000001" and row.dag_id == "dag_a" and row.tuner == "Random"
    assert row.counts == {"SUCCEEDED": 5, "FAILED": 1, "EARLY_STOPPED": 1, "RUNNING": 1}
    assert row.trials == 8 and row.active and row.best == 1.0  # minimize: the smallest
    assert row.started is not None and row.max_trial_number == 8


def test_trials_page_sorts_filters_searches_and_paginates(store):
    made = fill(store)
    engine = store.storage.engine
    page = queries.trials_page(engine, "eq000001", limit=3)
    assert page["total"] == 8 and [r["trial_index"] for r in page["rows"]] == [0, 1, 2]
    page = queries.trials_page(engine, "eq000001", limit=3, offset=6)
    assert [r["trial_index"] for r in page["rows"]] == [6, 7]
    by_metric = queries.trials_page(engine, "eq000001", sort="metric", descending=True)["rows"]
    assert [r["metric"] for r in by_metric[:5]] == [1.7, 1.6, 1.4, 1.2, 1.0]
    assert all(r["metric"] is None for r in by_metric[5:])  # NULLs last, both ways
    ok = queries.trials_page(engine, "eq000001", statuses=["SUCCEEDED", "EARLY_STOPPED"])
    assert ok["total"] == 6
    waiting = queries.trials_page(engine, "eq000001", statuses=["RUNNING"])["rows"]
    assert [r["trial_index"] for r in waiting] == [5]
    lr_sorted = [r["parameters"]["lr"] for r in queries.trials_page(engine, "eq000001", sort="param:lr")["rows"]]
    assert lr_sorted == sorted(m["parameters"]["lr"] for m in made)
    act_sorted = [r["parameters"]["act"] for r in queries.trials_page(engine, "eq000001", sort="param:act")["rows"]]
    assert act_sorted == sorted(m["parameters"]["act"] for m in made)
    hits = queries.trials_page(engine, "eq000001", search="adam")["rows"]
    assert {r["trial_index"] for r in hits} == {m["index"] for m in made if m["parameters"]["opt"]["_name"] == "adam"}
    assert queries.trials_page(engine, "eq000001", search="100%")["total"] == 0  # % is text, not a wildcard
    assert queries.trials_page(engine, "eq000001", search="'; DROP TABLE trials; --")["total"] == 0
    assert queries.trials_page(engine, "eq000001", sort="param:x') OR 1=1 --")["total"] == 8
    assert queries.trials_page(engine, "eq000001", sort="duration", descending=True)["total"] == 8


@pytest.mark.slow
@pytest.mark.parametrize("descending", [False, True])
def test_pages_of_every_sort_and_filter_put_together_are_the_whole_ordered_list(store, descending):
    """The page's trials are found first (joining only what the filter and the sort read) and
    read whole after: every page of three, one after the other, is the whole list in its order,
    each row whole, and the order is the sort's (ties by index, empty values last)."""
    fill(store)
    engine = store.storage.engine

    def still(rows: list[dict]) -> list[dict]:  # a running trial's duration grows between two reads
        return [{k: v for k, v in r.items() if k != "duration"} for r in rows]

    whole_rows = {r["trial_index"]: r for r in still(queries.trials_page(engine, "eq000001", limit=100)["rows"])}
    sorts = ["index", "status", "metric", "duration", "platform", "param:lr", "param:opt", "objective:0"]
    for sort in sorts:
        for filters in ({}, {"statuses": ["SUCCEEDED", "RUNNING"]}, {"search": "a"}, {"statuses": ["FAILED"]}):
            everything = queries.trials_page(engine, "eq000001", sort=sort, descending=descending, limit=100, **filters)
            rows = everything["rows"]
            assert everything["total"] == len(rows), (sort, filters)
            pieces = [
                r
                for offset in range(0, len(rows) + 3, 3)
                for r in queries.trials_page(
                    engine, "eq000001", sort=sort, descending=descending, limit=3, offset=offset, **filters
                )["rows"]
            ]
            assert still(pieces) == still(rows), (sort, filters)
            assert all(r == whole_rows[r["trial_index"]] for r in still(rows)), (sort, filters)
            if sort in ("metric", "objective:0"):
                values = [r["metric"] for r in rows]
                known = [v for v in values if v is not None]
                assert values == known + [None] * (len(values) - len(known))  # empty last, both ways
                assert known == sorted(known, reverse=descending)
            if sort == "index":
                indexes = [r["trial_index"] for r in rows]
                assert indexes == sorted(indexes, reverse=descending)
            if sort == "status":
                assert [r["status"] for r in rows] == sorted((r["status"] for r in rows), reverse=descending)


def test_detail_curves_and_chart_data(store):
    fill(store)
    engine = store.storage.engine
    detail = queries.trial_detail(engine, "eq000001", 3)
    assert detail["status"] == "EARLY_STOPPED" and len(detail["intermediate"]) == 5
    assert detail["handle"]["platform"] == "local" and detail["intermediate"][0][0] == 0
    chart = queries.chart_data(engine, "eq000001")
    assert chart.total == 8 and not chart.sampled
    assert len(chart.trials) == 8 and {r["status"] for r in chart.trials} >= {"SUCCEEDED", "FAILED"}
    chosen = queries.curves(engine, "eq000001")["curves"]
    assert {c["trial_index"] for c in chosen} == {0, 2, 3, 4, 5, 6, 7}  # finished best, running, stopped
    thin = queries.curves(engine, "eq000001", [1], max_points=4)["curves"]
    assert len(thin[0]["points"]) == 4 and thin[0]["points"][-1][0] == 4 and thin[0]["total"] == 5


def test_importance_and_export(store):
    made = fill(store)
    engine = store.storage.engine
    result = queries.importance(engine, "eq000001")
    assert result["trials"] == 5 and set(result["importances"]) <= {"lr", "opt", "opt/m", "act"}
    assert result["importances"] and math.isclose(sum(result["importances"].values()), 1.0, abs_tol=1e-6)
    text = queries.export_csv(engine, "eq000001")
    rows = list(csv.DictReader(io.StringIO(text)))
    assert len(rows) == 8 and "param:opt" in rows[0] and "param:lr" in rows[0]
    for row in rows:
        assert not any(value.startswith(("=", "+", "-", "@")) for value in row.values())
    for row, trial in zip(rows, made):
        raw = trial["parameters"]["act"]
        assert row["param:act"] == ("'" + raw if raw.startswith("=") else raw)
    assert queries.spreadsheet_safe("=1+1") == "'=1+1" and queries.spreadsheet_safe("-3") == "'-3"
    assert queries.spreadsheet_safe(-3.5) == -3.5 and queries.spreadsheet_safe("a=b") == "a=b"
    exported = queries.export_json(engine, "eq000001")
    assert len(exported) == 8 and exported[0]["parameters"]
    # JSON keeps values exactly: no spreadsheet guard there
    assert [t["parameters"]["act"] for t in exported] == [m["parameters"]["act"] for m in made]


def test_importance_reads_an_even_spread_past_its_cap(store, monkeypatch):
    """Past IMPORTANCE_TRIALS counted trials, PED-ANOVA reads an even spread of them and says
    so (84,971 trials held the API server's interpreter 19 s); below it, every one."""
    import sys

    module = sys.modules["trialflow.queries.importance"]
    fill(store)
    engine = store.storage.engine
    whole = queries.importance(engine, "eq000001")
    assert (whole["trials"], whole["of"]) == (5, 5)
    monkeypatch.setattr(module, "IMPORTANCE_TRIALS", 4)
    module._importance_cache.clear()
    read: list[list[int]] = []
    real = module.chart_rows
    monkeypatch.setattr(module, "chart_rows", lambda e, x, chosen: read.append(chosen) or real(e, x, chosen))
    sampled = queries.importance(engine, "eq000001")
    assert (sampled["trials"], sampled["of"]) == (4, 5) and read == [[0, 2, 4, 7]]  # of 0, 2, 4, 6, 7
    assert sampled["importances"] and math.isclose(sum(sampled["importances"].values()), 1.0, abs_tol=1e-6)


def test_unknown_experiment(store):
    with pytest.raises(queries.UnknownExperiment):
        queries.trials_page(store.storage.engine, "nope")
    # the streamed exports say so when called, before a response has begun
    for stream in (queries.iter_csv, queries.iter_json, queries.iter_trial_rows):
        with pytest.raises(queries.UnknownExperiment):
            stream(store.storage.engine, "nope")


def test_exports_stream_in_chunks_the_same_document(store):
    """CSV and JSON leave a few rows at a time (the rows come from a cursor, a chunk held at
    once) and join into the document the whole-list exports give; every row's intermediate
    count is the store's."""
    fill(store)
    engine = store.storage.engine
    chunks = list(queries.iter_csv(engine, "eq000001", rows_per_chunk=3))
    assert len(chunks) == 3  # header + 3 rows, 3 rows, 2 rows

    def still(rows: list[dict]) -> list[dict]:  # a running trial's duration grows between two reads
        return [{k: v for k, v in r.items() if k not in ("duration_s", "duration")} for r in rows]

    whole = queries.export_csv(engine, "eq000001")
    assert still(list(csv.DictReader(io.StringIO("".join(chunks))))) == still(list(csv.DictReader(io.StringIO(whole))))
    lines = "".join(chunks).splitlines()
    assert lines[0].startswith('"trial_index","trial_id"') and len(lines) == 9
    json_chunks = list(queries.iter_json(engine, "eq000001", rows_per_chunk=2))
    assert len(json_chunks) > 2
    streamed = json.loads("".join(json_chunks))
    assert still(streamed) == still(json.loads(json.dumps(queries.export_json(engine, "eq000001"))))
    page = queries.trials_page(engine, "eq000001", limit=50)["rows"]
    assert [r["intermediate_count"] for r in streamed] == [r["intermediate_count"] for r in page]
    assert any(r["intermediate_count"] for r in streamed)


def test_an_early_stop_after_the_final_result_keeps_it_in_every_view(store):
    """The assessor's stop took effect after the trial had written its final result: the trial
    stays EARLY_STOPPED and its final counts, as NNI counts it (the tuner, the best, sorting,
    curves, the summary), so no view shows a metric the others leave out."""
    from trialflow.store.results import best_row

    fill(store)
    engine = store.storage.engine
    asked = ask(store, "eq000001", 8, "eq000001-0008", RANDOM, SPACE)
    store.set_status(asked.storage_id, TrialStatus.RUNNING)
    store.record_metrics(asked.storage_id, [Metric("PERIODICAL", 0, 0.9), Metric("FINAL", 0, 0.5)])
    record = store.close(asked.storage_id, TrialStatus.EARLY_STOPPED, "Medianstop: below the median")
    assert record.status == TrialStatus.EARLY_STOPPED and record.final == 0.5
    frozen = store.storage.get_trial(asked.storage_id)
    assert frozen.state.name == "COMPLETE" and frozen.values == [0.5]  # what the tuner learns from
    best = best_row(store.trial_rows("eq000001"), "minimize")
    assert best is not None and best.trial_index == 8
    summary = queries.experiment_summary(engine, "eq000001")
    assert summary["best"]["trial_index"] == 8 and summary["best"]["status"] == "EARLY_STOPPED"
    (row,) = queries.list_experiments(engine)
    assert row.best == 0.5
    by_metric = queries.trials_page(engine, "eq000001", sort="metric")["rows"]
    assert by_metric[0]["trial_index"] == 8 and by_metric[0]["metric"] == 0.5
    assert 8 in {c["trial_index"] for c in queries.curves(engine, "eq000001", top=1)["curves"]}
    # an early stop with no final result stays out of all of them
    stopped = store.storage.get_trial(store.find_trial_id("eq000001", 3))
    assert stopped.state.name == "PRUNED" and stopped.values is None


def test_the_best_trial_is_the_first_counted_one_by_value_whatever_the_probe(store):
    """The summary's best is found by probing the trials of the best values first; a leader
    whose status does not count (its result kept, its status changed after) is passed over, by
    the probe or, when every probed trial is such, by the whole filtered sort."""
    from trialflow.queries.trials import best_trial_row

    fill(store)
    engine = store.storage.engine

    def expected(descending: bool) -> int:
        counted = ["SUCCEEDED", "EARLY_STOPPED"]
        rows = queries.trials_page(engine, "eq000001", sort="metric", descending=descending, statuses=counted)
        return rows["rows"][0]["trial_index"]

    for descending in (False, True):
        for probe in (1, 2, 20):
            found = best_trial_row(engine, "eq000001", descending, probe=probe)
            assert found is not None and found["trial_index"] == expected(descending), (descending, probe)
    leader = best_trial_row(engine, "eq000001", False)
    assert leader is not None and leader["trial_index"] == 0  # minimize: 1.0, the smallest
    from trialflow.queries.tables import TRIAL_ATTRS, VALUES

    with engine.begin() as conn:  # written as a finished trial's status is (Optuna refuses it)
        attrs = TRIAL_ATTRS.c
        where = sa.and_(attrs.trial_id == store.find_trial_id("eq000001", 0), attrs.key == "nni_status")
        assert conn.execute(sa.update(TRIAL_ATTRS).where(where).values(value_json='"USER_CANCELED"')).rowcount == 1
    for probe in (1, 2, 20):
        found = best_trial_row(engine, "eq000001", False, probe=probe)
        assert found is not None and found["trial_index"] == expected(False) != 0, probe
    assert queries.experiment_summary(engine, "eq000001")["best"]["trial_index"] == expected(False)
    # every trial with a value no longer counts: the early-stopped one without a result is no best,
    # whether the probe saw every valued trial (20) or fell back to the whole sort (1)
    with engine.begin() as conn:
        valued = sa.select(VALUES.c.trial_id)
        conn.execute(
            sa.update(TRIAL_ATTRS)
            .where(TRIAL_ATTRS.c.key == "nni_status", TRIAL_ATTRS.c.trial_id.in_(valued))
            .values(value_json='"USER_CANCELED"')
        )
    assert queries.trials_page(engine, "eq000001", statuses=["EARLY_STOPPED"])["total"] == 1
    for probe in (1, 20):
        assert best_trial_row(engine, "eq000001", False, probe=probe) is None, probe


@pytest.mark.parametrize("total", [0, 1, 2, 3, 7, 100, 2001, 12_345])
@pytest.mark.parametrize("max_points", [4, 10, 200])
def test_downsampling_keeps_ends_and_every_spike(total, max_points):
    import random

    rng = random.Random(total * 1000 + max_points)
    points = [(step * 3, rng.random()) for step in range(total)]
    spikes = {}
    if total > 20:
        spikes = {points[total // 3][0]: 99.0, points[total // 2][0]: -99.0}
        points = [(s, spikes.get(s, v)) for s, v in points]
    out = queries.downsample(iter(points), total, max_points)
    assert len(out) <= max(max_points, total if total <= max_points else 0)
    assert [p[0] for p in out] == sorted({p[0] for p in out})  # in step order, no step twice
    if total:
        assert out[0] == list(points[0]) and out[-1] == list(points[-1])
    if total <= max_points:
        assert out == [list(p) for p in points]
    for step, value in spikes.items():
        assert [step, value] in out  # a spike or a dip is never hidden


def test_a_trial_page_sends_a_curve_of_bounded_size_and_says_how_many_points_there_are(tmp_path, store):
    store.open_experiment("ebig0001")
    asked = ask(store, "ebig0001", 0, "ebig0001-0000", RANDOM, SPACE)
    store.record_metrics(asked.storage_id, [Metric("PERIODICAL", s, float(s % 97)) for s in range(50_000)])
    store.record_metrics(asked.storage_id, [Metric("PERIODICAL", 31_337, 1e6)])
    detail = queries.trial_detail(store.storage.engine, "ebig0001", 0)
    assert detail["intermediate_total"] == 50_000 and len(detail["intermediate"]) <= queries.DETAIL_POINTS
    assert [31_337, 1e6] in detail["intermediate"]
    assert detail["intermediate"][-1] == [49_999, float(49_999 % 97)]


def test_every_point_downloads_as_stored_non_finite_ones_by_name(tmp_path, store):
    """Optuna keeps inf and NaN as NULL plus a type: the download writes them as inf/-inf/nan,
    not "None", and an unknown trial or experiment is refused before anything is written."""
    store.open_experiment("epoint01")
    asked = ask(store, "epoint01", 0, "epoint01-0000", RANDOM, SPACE)
    values = [0.25, float("inf"), float("-inf"), float("nan"), 1e-300, 3.0]
    for step, value in enumerate(values):  # Optuna's own write: how a non-finite value gets in
        store.storage.set_trial_intermediate_value(asked.storage_id, step, value)
    text = "".join(queries.iter_intermediate_csv(store.storage.engine, "epoint01", 0))
    assert text.splitlines() == ["step,value", "0,0.25", "1,inf", "2,-inf", "3,nan", "4,1e-300", "5,3.0"]
    assert [float(line.split(",")[1]) for line in text.splitlines()[1:]][:3] == [0.25, float("inf"), float("-inf")]
    for experiment, index in (("epoint01", 7), ("nope", 0)):
        with pytest.raises(queries.UnknownExperiment):
            queries.iter_intermediate_csv(store.storage.engine, experiment, index)


def test_a_growing_big_curve_is_thinned_from_what_was_kept_plus_the_new_points(tmp_path, store):
    """A running trial's page is asked again and again: after a few more results only the new
    points are read and merged with the kept curve *by step*, so the new stretch is drawn as
    densely as the old one (merged by position, 60 raw points after 100 thinned ones took a
    third of the curve for 1 % of the steps); spikes, ends and size hold; many more results and
    the whole curve is thinned again."""
    store.open_experiment("egrow001")
    asked = ask(store, "egrow001", 0, "egrow001-0000", RANDOM, SPACE)
    engine = store.storage.engine
    store.record_metrics(asked.storage_id, [Metric("PERIODICAL", s, float(s % 13)) for s in range(5_000)])
    store.record_metrics(asked.storage_id, [Metric("PERIODICAL", 1_234, -50.0)])
    first = queries.trial_detail(engine, "egrow001", 0, max_points=100)
    assert len(first["intermediate"]) <= 100 and [1_234, -50.0] in first["intermediate"]
    reads: list[str] = []
    sa.event.listen(engine, "before_cursor_execute", lambda *a: reads.append(a[2]))

    store.record_metrics(asked.storage_id, [Metric("PERIODICAL", s, float(s % 13)) for s in range(5_000, 5_060)])
    store.record_metrics(asked.storage_id, [Metric("PERIODICAL", 5_030, 99.0)])
    reads.clear()
    second = queries.trial_detail(engine, "egrow001", 0, max_points=100)
    curve = second["intermediate"]
    assert second["intermediate_total"] == 5_060 and len(curve) <= 100
    assert [1_234, -50.0] in curve and [5_030, 99.0] in curve
    assert curve[0] == [0, 0.0] and curve[-1] == [5_059, float(5_059 % 13)]
    assert [s for s, _ in curve] == sorted({s for s, _ in curve})
    assert any("step >" in r for r in reads)  # the kept curve was extended, not read again whole
    assert sum(1 for step, _ in curve if step >= 5_000) <= 4  # 1 % of the steps: a bucket or so
    assert queries.trial_detail(engine, "egrow001", 0, max_points=100)["intermediate"] == curve

    store.record_metrics(asked.storage_id, [Metric("PERIODICAL", s, float(s % 13)) for s in range(5_060, 8_000)])
    reads.clear()
    third = queries.trial_detail(engine, "egrow001", 0, max_points=100)["intermediate"]
    assert not any("step >" in r for r in reads)  # 2,940 more than the curve holds: read again whole
    assert [1_234, -50.0] in third and [5_030, 99.0] in third and third[-1][0] == 7_999
    halves = sum(1 for step, _ in third if step < 4_000), sum(1 for step, _ in third if step >= 4_000)
    assert 0.7 < halves[0] / halves[1] < 1.4


def test_search_finds_what_the_person_sees_and_nested_parameters_sort(store):
    """Found by hostile input: 'ünï' and 'x"y' found nothing (the store holds JSON escapes) and
    a lone backslash matched almost everything; sorting by 'loss/alpha' did nothing."""
    space = parse_search_space(
        {
            "name": {"_type": "choice", "_value": ["ünï", 'x"y', "back\\slash", "plain"]},
            "loss": {
                "_type": "choice",
                "_value": [
                    {"_name": "huber", "alpha": {"_type": "uniform", "_value": [0, 1]}},
                    {"_name": "absolute", "alpha": {"_type": "uniform", "_value": [2, 3]}},
                ],
            },
        }
    )
    grid = AlgorithmConfig(name="Random", class_args={"seed": 1})
    store.open_experiment("esearch1")
    made = [ask(store, "esearch1", i, f"esearch1-{i:04d}", grid, space).parameters for i in range(24)]
    engine = store.storage.engine
    for text in ("ünï", 'x"y', "back\\slash", "\\"):
        expected = {i for i, p in enumerate(made) if text in p["name"]}
        found = {r["trial_index"] for r in queries.trials_page(engine, "esearch1", search=text, limit=100)["rows"]}
        assert found == expected, text
    by_alpha = queries.trials_page(engine, "esearch1", sort="param:loss/alpha", limit=100)["rows"]
    assert [r["parameters"]["loss"]["alpha"] for r in by_alpha] == sorted(p["loss"]["alpha"] for p in made)
    by_choice = queries.trials_page(engine, "esearch1", sort="param:loss", descending=True, limit=100)["rows"]
    assert [r["parameters"]["loss"]["_name"] for r in by_choice] == sorted(
        (p["loss"]["_name"] for p in made), reverse=True
    )


def test_parameter_paths_try_the_whole_name_first():
    assert queries.parameter_paths("lr")[:2] == [("lr",), ("lr", "_name")]
    paths = queries.parameter_paths("a/b")
    assert paths[:2] == [("a/b",), ("a/b", "_name")] and ("a", "b") in paths
    assert len(queries.parameter_paths("a/b/c/d/e/f/g")) == 4  # whole and full split only


def test_a_trials_page_reads_its_experiments_header_as_the_summary_says_it(store):
    """The trial route reads experiment_header, not the whole summary (issue 47, 3): every key it
    has is the summary's, with a trial running and after it ended."""
    made = fill(store)
    engine = store.storage.engine
    keys = ("experiment_id", "dag_id", "task_group", "run_id", "active", "runs", "stopped")

    def both() -> tuple[dict, dict]:
        header = queries.experiment_header(engine, "eq000001")
        summary = queries.experiment_summary(engine, "eq000001")
        assert set(header) == set(keys)
        return header, {k: summary[k] for k in keys}

    header, summary = both()
    assert header == summary and header["active"] is True and header["dag_id"] == "dag_a"
    running = next(m for m in made if m["status"] is None)
    store.close(store.find_trial_id("eq000001", running["index"]), TrialStatus.USER_CANCELED, "stopped for the test")
    header, summary = both()
    assert header == summary and header["active"] is False
    with pytest.raises(queries.UnknownExperiment):
        queries.experiment_header(engine, "nope")


@pytest.mark.parametrize(
    "text",
    [
        '"\\ud800"',  # a lone surrogate: pydantic-core's parser refuses it, the json module reads it
        '{"a": 1, "a": 2}',
        "NaN",
        "-Infinity",
        "1e400",
        "123456789012345678901234567890",
        '{"lr": 0.005100486759046462, "opt": {"_name": "sgd"}}',
        '"x\\"y \\u00fc"',
        "-0.0",
        "not json",
        "",
        "1 2",
        "1" * 5000,  # past Python's 4,300 digits: unreadable both ways
        "[" * 300 + "]" * 300,  # past pydantic-core's 200 levels: the json module reads it
        "[" * 100_000 + "]" * 100_000,  # past Python's recursion limit: unreadable, never a RecursionError
    ],
)
def test_a_stored_value_reads_as_the_json_module_reads_it(text):
    """As the json module reads it, JSON's NaN and Infinity as their text (no page can send them)."""
    from trialflow.queries.tables import decoded

    try:
        expected = json.loads(text, parse_constant=str)
    except (ValueError, RecursionError):
        expected = None
    got = decoded(text)
    if isinstance(expected, float) and math.isnan(expected):
        assert isinstance(got, float) and math.isnan(got)
    else:
        assert got == expected and type(got) is type(expected) and repr(got) == repr(expected)

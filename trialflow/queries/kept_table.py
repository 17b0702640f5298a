"""The trial table searched, or sorted by a parameter, from the trials kept in memory.

A search (text in a trial's id, parameters, message or status) and a sort by a parameter read a
JSON attribute of every trial of the experiment: in SQL, LIKE over four attributes or JSON
functions over the parameters of each of 100,000 trials cost 300 and 550 ms a page
(bench/ui.py), on every page turned. What both read of a settled trial never changes (Optuna
freezes a finished trial's user attributes, see trialflow.queries.settled), so it is kept as a
column beside the settled trials: read once, then only for the trials settled since and the
ones still running. The filter by status uses the kept NNI status, the same the tallies count.

The order is the one the table had in SQL: trials with a number for the parameter first, by it;
then those with only a text (a string, a boolean as true/false, a nested choice by its
``_name``), by it; a trial without it last; ties by trial index (descending flips the values,
never the ties; equal numbers written differently, 1 and 1.0, tie here where SQL ordered them
by their text). Each trial's key is read from its stored JSON in Python
(trialflow.queries.parameter_columns.sort_value), the same on every database; texts compare by
code point (SQLite's binary order; PostgreSQL's was its collation's). A search matches
regardless of ASCII case on every database (PostgreSQL's LIKE was case-sensitive): the stored
JSON is ASCII, non-ASCII characters written as escapes, and the search is matched in that form.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from trialflow.queries.parameter_columns import sort_value
from trialflow.queries.settled import ColumnReader, StudyTrials, TrialFacts, kept_column
from trialflow.queries.tables import STATUSES, TRIAL_ATTRS, TRIAL_INDEX, decoded

#: The attributes a search looks in, as the table shows them.
SEARCHED = ("trial_id", "parameters", "message", "nni_status")
_SEPARATOR = "\n"  # never inside stored JSON text (a newline in a value is written \n)

#: A parameter's sort key: its number, its text (either may be None).
SortValue = tuple[float | None, str | None]


@dataclass(frozen=True)
class TablePage:
    """The trial indexes of one page, in order, and how many trials matched."""

    indexes: list[int]
    total: int


def _scope(sid: int, indexes: Sequence[int] | None) -> list[sa.ColumnElement[bool]]:
    where = [TRIAL_INDEX.c.study_id == sid]
    if indexes is not None:
        where.append(TRIAL_INDEX.c.trial_index.in_(list(indexes)))
    return where


def _sort_values(name: str) -> ColumnReader:
    def read(conn: sa.Connection, sid: int, indexes: Sequence[int] | None) -> dict[int, SortValue]:
        params = TRIAL_ATTRS.alias("p")
        query = (
            sa.select(TRIAL_INDEX.c.trial_index, params.c.value_json)
            .select_from(
                TRIAL_INDEX.outerjoin(
                    params, sa.and_(params.c.trial_id == TRIAL_INDEX.c.trial_id, params.c.key == "parameters")
                )
            )
            .where(*_scope(sid, indexes))
        )
        return {index: sort_value(decoded(raw), name) for index, raw in conn.execute(query)}

    return read


def _search_text(conn: sa.Connection, sid: int, indexes: Sequence[int] | None) -> dict[int, str]:
    aliases = {name: TRIAL_ATTRS.alias(f"s_{name}") for name in SEARCHED}
    joined: sa.FromClause = TRIAL_INDEX
    for name, alias in aliases.items():
        joined = joined.outerjoin(alias, sa.and_(alias.c.trial_id == TRIAL_INDEX.c.trial_id, alias.c.key == name))
    query = sa.select(TRIAL_INDEX.c.trial_index, *(a.c.value_json for a in aliases.values())).select_from(joined)
    return {
        index: _SEPARATOR.join(v for v in values if v is not None).lower()
        for index, *values in conn.execute(query.where(*_scope(sid, indexes)))
    }


def _needle(search: str) -> str:
    """The search as the store holds text: JSON-escaped ('ünï' is \\u00fc..., 'x"y' is x\\"y)."""
    return json.dumps(search)[1:-1].lower()


def _ordered(trials: list[TrialFacts], keys: dict[int, SortValue], descending: bool) -> list[int]:
    """Trial indexes with a number first, by it; then those with only a text, by it; then the
    rest; ties by index (descending flips the values, never the ties). Each part is one sort
    of plain floats or strings (a sort of 100,000 (number, text) tuples took 4x as long)."""
    nothing: SortValue = (None, None)
    numbered: list[int] = []
    numbers: list[float] = []
    texted: list[int] = []
    texts: list[str] = []
    rest: list[int] = []
    for index in sorted(t.index for t in trials):
        number, text = keys.get(index) or nothing
        if number is not None:
            numbered.append(index)
            numbers.append(number)
        elif text is not None:
            texted.append(index)
            texts.append(text)
        else:
            rest.append(index)
    by_number = sorted(range(len(numbered)), key=numbers.__getitem__, reverse=descending)  # stable
    by_text = sorted(range(len(texted)), key=texts.__getitem__, reverse=descending)
    return [numbered[i] for i in by_number] + [texted[i] for i in by_text] + rest


def table_page(
    engine: Engine,
    sid: int,
    study: StudyTrials,
    *,
    statuses: Sequence[str] | None,
    indexes: Sequence[int] | None,
    search: str,
    sort_parameter: str | None,
    descending: bool,
    offset: int,
    limit: int,
) -> TablePage:
    """One page of ``study``'s trials (study_trials' answer): filtered by status, index and
    search, sorted by index or by the parameter ``sort_parameter``."""
    trials = study.trials()
    if statuses:
        wanted = set(statuses) & set(STATUSES)  # an unknown name matches nothing, as in SQL
        trials = [t for t in trials if t.status in wanted]
    if indexes is not None:
        chosen = set(indexes)
        trials = [t for t in trials if t.index in chosen]
    if search:
        texts = kept_column(engine, sid, study, "search", _search_text)
        needle = _needle(search)
        trials = [t for t in trials if needle in (texts.get(t.index) or "")]
    if sort_parameter is not None:
        keys = kept_column(engine, sid, study, f"param:{sort_parameter}", _sort_values(sort_parameter))
        order = _ordered(trials, keys, descending)
    else:
        order = sorted((t.index for t in trials), reverse=descending)
    return TablePage(order[offset : offset + limit], len(order))

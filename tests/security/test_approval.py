"""What a person approves (issue 37, item 7).

A user allowed to post asset events made the shipped example's approval show forged parameters,
a forged metric and a link ``[x](javascript:alert(document.domain)//)``; ``train`` refused the
event, but a person approves what they were shown. The approval text is now built from the
result the reader accepted, every value escaped, and its one link leads only to this Airflow.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from airflow.sdk.execution_time.context import TriggeringAssetEventsAccessor

from tests.helpers.assets import event, published
from trialflow.assets import approval_text, best_parameters_asset
from trialflow.outputs.published import approval_markdown, read_published, safe_link

T0 = datetime(2026, 11, 26, tzinfo=UTC)
OWN = "https://airflow.example.org"
HOSTILE_LINKS = [
    "javascript:alert(document.domain)//",
    "JaVaScRiPt:alert(1)",
    "data:text/html,<script>alert(1)</script>",
    "//evil.example/x",
    "https://evil.example/plugin/trialflow",
    "https://airflow.example.org.evil.example/x",
    "https://airflow.example.org@evil.example/x",
    "http://airflow.example.org/x) [y](javascript:alert(1)",
    "/ok\n[x](javascript:alert(1))",
    "vbscript:msgbox(1)",
]


@pytest.mark.parametrize("url", HOSTILE_LINKS)
def test_no_link_but_one_to_this_airflow(url):
    assert safe_link(url, OWN) is None


def test_links_to_this_airflow_are_kept():
    assert safe_link("/plugin/trialflow?experiment=e1", OWN) == "/plugin/trialflow?experiment=e1"
    assert safe_link(f"{OWN}/plugin/trialflow?experiment=e1", OWN) == f"{OWN}/plugin/trialflow?experiment=e1"
    assert safe_link(f"{OWN}/x", None) is None  # no configured address: only paths from the root


def hostile_best(url: str) -> dict:
    extra = published({"C": "[x](javascript:alert(1)) <img src=x onerror=alert(1)> `code` *b*\n# h"}, "r1")
    return {**extra, "url": url, "trial_id": "t](javascript:alert(1))"}


@pytest.mark.parametrize("url", HOSTILE_LINKS)
def test_the_approval_escapes_every_value_and_drops_a_hostile_link(url):
    text = approval_markdown(read_published(hostile_best(url)), OWN)
    assert "](" not in text  # no link at all: every ']' and '(' a value brought is escaped
    trial_id, parameters = text.split(": trial ", 1)[1].split(" scored ")[0], text.split(" with ", 1)[1]
    for brought in (trial_id, parameters):  # each character Markdown or HTML acts on is escaped
        assert not re.search(r"(?<!\\)[<`\[\]()*]", brought), brought
    assert "\n" not in text


def test_a_genuine_result_is_shown_with_its_link():
    text = approval_markdown(
        read_published({**published({"C": 2}, "r1"), "url": "/plugin/trialflow?experiment=e1"}), OWN
    )
    assert text.startswith("Experiment [") and "](/plugin/trialflow?experiment=e1)" in text
    assert '\\{"C": 2\\}' not in text and '{"C": 2}' in text


def test_a_forged_event_shows_nothing_of_its_own():
    """The forger's extra never reaches the text: the reader refuses the event first."""
    asset = best_parameters_asset("dag_a")
    forged = {**hostile_best("javascript:alert(1)"), "parameters": {"C": 666}}
    events = TriggeringAssetEventsAccessor.build([event(asset, forged, T0 + timedelta(minutes=1), source="dag_evil")])
    text = approval_text(events)
    assert text.startswith("Nothing to approve") and "666" not in text
    genuine = event(asset, published({"C": 2}, "r1"), T0)
    both = TriggeringAssetEventsAccessor.build([genuine, event(asset, forged, T0 + timedelta(minutes=1), None)])
    assert '{"C": 2}' in approval_text(both) and "666" not in approval_text(both)


def test_the_shipped_example_builds_its_approval_with_approval_text():
    example = Path(__file__).resolve().parents[2] / "dags" / "digits_final_model.py"
    source = example.read_text()
    assert "approval_text(triggering_asset_events)" in source and "event.extra" not in source

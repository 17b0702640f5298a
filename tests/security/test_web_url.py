"""trialWebUrl: only the documented placeholders, bare, in an http(s) address; refused at
validate time with the key named, never run as a format program in a worker or api-server."""

from __future__ import annotations

import json

import pytest

from trialflow.config import ConfigError, load_config
from trialflow.config.web_url import PLACEHOLDERS, WebUrlError, check_web_url, fill_web_url
from trialflow.ui.links import platform_url

HANDLE = {"trial_id": "e1-0001", "experiment_id": "e1", "name": "job/1", "namespace": "ns", "trial_dir": "/a b"}


@pytest.mark.parametrize(
    "template, expected",
    [
        ("javascript:alert(1)//{trial_id}", "expected an http:// or https:// address"),
        ("data:text/html,{trial_id}", "expected an http:// or https:// address"),
        ("https://x/{trial_id", "expected '}'"),
        ("https://x/}{trial_id}", "Single '}'"),
        ("https://x/{0}", "{0} is not a placeholder"),
        ("https://x/{}", "{} is not a placeholder"),
        ("https://x/{trial_id.__class__}", "is not a placeholder"),
        ("https://x/{trial_id[0]}", "is not a placeholder"),
        ("https://x/{trial_id:>300000000}", "may not carry a format spec"),
        ("https://x/{trial_id!r}", "may not carry a format spec"),
        ("https://x/{password}", "{password} is not a placeholder"),
        ("https://x/" + "a" * 3000, "longer than"),
    ],
)
def test_a_template_that_is_not_an_address_with_placeholders_is_refused(tmp_path, template, expected):
    with pytest.raises(WebUrlError, match=expected.replace("{", r"\{").replace("[", r"\[")):
        check_web_url(template)
    assert fill_web_url(template, HANDLE) is None  # and never rendered (one stored before the check)
    path = tmp_path / "c.yml"
    path.write_text(
        "searchSpace: {x: {_type: uniform, _value: [0, 1]}}\ntrialCommand: x\ntrialConcurrency: 1\n"
        f"tuner: {{name: TPE}}\ntrainingService:\n  platform: local\n  trialWebUrl: {json.dumps(template)}\n"
    )
    with pytest.raises(ConfigError, match="trainingService.trialWebUrl: "):
        load_config(path)


def test_documented_placeholders_fill_url_quoted_and_absent_ones_are_empty():
    template = "https://dash/#/{namespace}/{name}?t={trial_id}&d={trial_dir}&h={host}&{{literal}}"
    assert check_web_url(template) == template
    assert fill_web_url(template, HANDLE) == "https://dash/#/ns/job%2F1?t=e1-0001&d=%2Fa%20b&h=&{literal}"
    assert platform_url(template, HANDLE) == fill_web_url(template, HANDLE)
    assert set(PLACEHOLDERS) == {"trial_id", "experiment_id", "name", "namespace", "host", "trial_dir"}


def test_a_platforms_own_page_must_be_http():
    assert platform_url(None, {"web_url": "javascript:alert(1)"}) is None
    assert platform_url(None, {"web_url": "https://pai/job/1"}) == "https://pai/job/1"

"""Secrets inside values (issue 37, item 8).

Masking was by key only: the config tab (readers see it), ``convert`` and ``render`` showed
``trialCommand: API_TOKEN=... AWS_SECRET_ACCESS_KEY=... --password ...``, ``user:pass@`` in
trialWebUrl and in an OpenPAI host, and a code folder named ``code_token=...``. Now every string
shown is masked where it assigns to, passes a flag named like, or carries in a URL, a secret.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.security.test_secrets import platform_cases
from trialflow.config import load_config
from trialflow.config.redaction import mask_text, redact
from trialflow.experiment import Experiment

TRIALFLOW = [sys.executable, "-m", "trialflow.cli"]
SECRETS = {
    "assignment": "tok-secret-1",
    "aws": "aws-secret-2",
    "flag": "pw-secret-3",
    "url": "url-secret-4",
    "folder": "dir-secret-5",
    "openpai": "pai-secret-6",
    "quoted": "quoted secret 7",
}


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("API_TOKEN=abc python t.py", "API_TOKEN=*** python t.py"),
        ("AWS_SECRET_ACCESS_KEY=x aws s3 ls", "AWS_SECRET_ACCESS_KEY=*** aws s3 ls"),
        ("export DB_PASSWORD='a b' && run", "export DB_PASSWORD=*** && run"),
        ('MY_API_KEY="a \\" b" run', "MY_API_KEY=*** run"),
        ("python t.py --password hunter2 --lr 0.1", "python t.py --password *** --lr 0.1"),
        ("python t.py --api-key=K --auth-token 'x y'", "python t.py --api-key=*** --auth-token ***"),
        ("https://bob:pw@jobs.example/1", "https://bob:***@jobs.example/1"),
        ("git clone https://ghp_abc@github.com/o/r", "git clone https://***@github.com/o/r"),
        ("/data/code_token=abc", "/data/code_token=***"),
        ("x.private_key=k", "x.private_key=***"),
        # an Azure storage connection string, as an abfs:// store's error may repeat it
        (
            "DefaultEndpointsProtocol=http;AccountName=dev;AccountKey=Eby8vdM02x==;BlobEndpoint=http://b",
            "DefaultEndpointsProtocol=http;AccountName=dev;AccountKey=***",
        ),
        ("refused: SharedAccessSignature=sv=2020&sig=abc", "refused: SharedAccessSignature=***"),
        # an HTTP credential, as curl -H or a request's error writes it
        ("curl -H 'Authorization: Bearer sk-abc123' http://h", "curl -H 'Authorization: Bearer ***' http://h"),
        ("Authorization: Basic dXNlcjpwdw==", "Authorization: Basic ***"),
        ("headers={'authorization=tok1'}", "headers={'authorization=***'}"),
        ("got 401 for bearer eyJhbGciOi.x.y", "got 401 for bearer ***"),
    ],
)
def test_secrets_inside_values_are_masked(text, shown):
    assert mask_text(text) == shown


@pytest.mark.parametrize(
    "text",
    [
        "python train.py --passes 3 --tokenizer bert --author me",
        "tokenizer=bert BATCH=32 python t.py",
        "python t.py --token -v",  # a flag after it, not its value
        "https://jobs.example/{trial_id}?page=1",
        "mailto:someone@example.org",
        "lr=0.1 momentum=0.9",
        "AccountName=dev;BlobEndpoint=http://127.0.0.1:10000/dev",
        "the authorization failed; bearer-token auth is off",
    ],
)
def test_what_is_not_a_secret_stays_as_it_was(text):
    assert mask_text(text) == text


def test_a_search_space_is_shown_exactly():
    """Its choices are values a person and the add-trial check must see as they are."""
    config = {"searchSpace": {"t": {"_type": "choice", "_value": ["token=a", "--password b"]}}, "x": "token=a"}
    assert redact(config) == {**config, "x": "token=***"}


def _cli(*args: str) -> str:
    result = subprocess.run(TRIALFLOW + list(args), capture_output=True, text=True, timeout=120)
    return result.stdout + result.stderr


def write_configs(tmp_path: Path) -> dict[str, Path]:
    s = SECRETS
    code = tmp_path / f"code_token={s['folder']}"
    code.mkdir()
    (code / "t.py").write_text("print(1)\n")
    local = {
        "searchSpace": {"x": {"_type": "uniform", "_value": [0, 1]}},
        "trialCommand": (
            f"API_TOKEN={s['assignment']} AWS_SECRET_ACCESS_KEY={s['aws']} DB_PASSWORD='{s['quoted']}' "
            f"python3 t.py --password {s['flag']}"
        ),
        "trialCodeDirectory": str(code),
        "trialConcurrency": 1,
        "maxTrialNumber": 1,
        "tuner": {"name": "Random"},
        "trainingService": {
            "platform": "local",
            "trialWebUrl": f"https://bob:{s['url']}@jobs.example/{{experiment_id}}/{{trial_id}}",
        },
    }
    configs, _ = platform_cases(tmp_path)
    openpai = configs["openpai"]
    openpai["trainingService"] = {**openpai["trainingService"], "host": f"http://alice:{s['openpai']}@127.0.0.1:9"}
    paths = {}
    for name, config in (("local", local), ("openpai", openpai)):
        paths[name] = tmp_path / f"{name}.yml"
        paths[name].write_text(yaml.safe_dump(config))
    return paths


@pytest.mark.slow
def test_convert_render_and_validate_mask_secrets_inside_values(tmp_path):
    paths = write_configs(tmp_path)
    outputs = {
        f"{name} {command}": _cli(command, str(path))
        for name, path in paths.items()
        for command in ("validate", "convert", "render")
    }
    for where, text in outputs.items():
        leaked = [key for key, value in SECRETS.items() if value in text]
        assert not leaked, f"{where} printed {leaked}:\n{text[-2000:]}"
    converted = yaml.safe_load(outputs["local convert"])
    assert converted["trialCommand"] == (
        "API_TOKEN=*** AWS_SECRET_ACCESS_KEY=*** DB_PASSWORD=*** python3 t.py --password ***"
    )  # masked, still shown to be set
    assert converted["trainingService"]["trialWebUrl"].startswith("https://bob:***@jobs.example/")
    assert "code_token=***" in converted["trialCodeDirectory"]
    assert "alice:***@127.0.0.1" in outputs["openpai convert"]


def test_the_stored_config_the_pages_show_holds_no_secret_inside_a_value(tmp_path):
    """What the start step writes to the store (the config tab reads it, readers included)."""
    paths = write_configs(tmp_path)
    for path in paths.values():
        stored = Experiment(load_config(path), "esecret", tmp_path / "work").description()
        text = yaml.safe_dump(stored)
        assert not [key for key, value in SECRETS.items() if value in text], text

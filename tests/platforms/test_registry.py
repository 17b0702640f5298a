"""Third-party platforms through the ``trialflow.platforms`` entry-point group."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from trialflow.config import ConfigError, load_config
from trialflow.config.loader import _known_keys, experiment_model
from trialflow.config.registry import PlatformUnavailable, get_platform_entry, platform_entries

PLUGINS = Path(__file__).resolve().parent.parent / "integration" / "plugins"
CONFIG = """\
searchSpace: {x: {_type: uniform, _value: [0, 1]}}
trialCommand: python3 t.py
trialConcurrency: 1
tuner: {name: TPE}
trainingService: {platform: echo, greeting: hello}
"""


def _reset() -> None:
    for cached in (platform_entries, experiment_model, _known_keys):
        cached.cache_clear()


@pytest.fixture
def echo_installed(monkeypatch):
    monkeypatch.syspath_prepend(str(PLUGINS))
    _reset()
    yield
    _reset()
    sys.modules.pop("trialflow_echo", None)


def test_a_plugin_platform_validates_with_its_own_model(echo_installed, write):
    config = load_config(write("c.yml", CONFIG))
    assert type(config.training_service[0]).__name__ == "EchoConfig"
    assert config.training_service[0].greeting == "hello"
    with pytest.raises(ConfigError, match=r"trainingService\.greeting: required key is missing"):
        load_config(write("d.yml", CONFIG.replace(", greeting: hello", "")))
    with pytest.raises(ConfigError, match=r"trainingService\.volume: unknown key"):
        load_config(write("e.yml", CONFIG.replace("greeting: hello", "greeting: hi, volume: 11")))


def test_a_plugin_platform_loads_its_implementation(echo_installed):
    implementation = get_platform_entry("echo").load()
    assert implementation.name == "echo"


def test_without_the_plugin_the_platform_is_unknown(write):
    _reset()
    with pytest.raises(ConfigError, match="unknown platform 'echo'"):
        load_config(write("c.yml", CONFIG))
    with pytest.raises(PlatformUnavailable, match="unknown platform"):
        get_platform_entry("echo")


def test_builtins_without_a_runner_say_so():
    with pytest.raises(PlatformUnavailable, match="not part of this release"):
        get_platform_entry("dlc").load()


def test_a_handle_says_where_it_runs_and_which_logs_the_pages_may_read():
    from trialflow.platforms.base import handle_location, handle_log_files

    assert handle_location({"host": "gpu-3", "trial_dir": "/t/1"}) == "on gpu-3 in /t/1"
    assert handle_location({"kind": "TFJob", "namespace": "ml", "name": "e1-0001"}) == "Kubernetes TFJob ml/e1-0001"
    assert handle_location({"location": "slot 4 of cluster A", "host": "x"}) == "slot 4 of cluster A"
    assert handle_location({"platform": "aml"}) is None
    assert handle_log_files({"log_files": ["out.txt"], "platform": "local"}) == ["out.txt"]
    assert handle_log_files({"platform": "local"}) == ["stdout", "stderr"]  # stored before handles said it
    assert handle_log_files({"platform": "remote", "trial_dir": "/x"}) == []


def test_connections_open_to_credential_kinds_of_plug_ins():
    import asyncio

    from trialflow.platforms.base import Connections

    async def slurm_token(conn_id: str) -> str:
        return f"token-of-{conn_id}"

    connections = Connections(token=slurm_token, others={"slurm": slurm_token})
    assert connections.opener("token") is slurm_token and connections.opener("ssh") is None
    opener = connections.opener("slurm")
    assert opener is not None and asyncio.run(opener("c1")) == "token-of-c1"
    assert Connections().opener("anything") is None

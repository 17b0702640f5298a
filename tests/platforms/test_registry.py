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

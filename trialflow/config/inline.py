"""An experiment config written in Python (a mapping in a DAG file), carried as one string.

Every part of trialflow that runs an experiment (the operators in a worker, the triggers in the
triggerer, the DAG plan cache) is handed where the config is as one string: a file's path.
A config written in the DAG file has no file, and the triggerer never parses DAG files, so
the config itself travels in that string: JSON with the DAG file it came from (named in every
error) and the folder its relative paths resolve against. It is checked by the same loader and
model as a YAML file, and a plan of it is cached by its content.

Such a config may not hold secrets: the string is a templated field of the experiment's tasks
and a trigger's argument, so Airflow stores and shows it (Rendered Template); a password or
token belongs in an Airflow connection (or a YAML file, whose path alone travels).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any

from trialflow.config.errors import ConfigError, PathPart, Problem
from trialflow.config.files import MAX_CONFIG_BYTES
from trialflow.config.redaction import redact

#: The inline form's first key: what tells it from a path (no path starts with '{').
MARK = '{"trialflow_inline_config": 1'


@dataclass(frozen=True)
class InlineConfig:
    """A config from a DAG file: the mapping, where it came from, where its paths start."""

    data: dict[str, Any]
    origin: Path
    base_dir: Path


def is_inline(source: object) -> bool:
    return isinstance(source, str) and source.startswith(MARK)


def inline_source(config: Mapping[str, Any], origin: str | Path, base_dir: str | Path) -> str:
    """``config`` (NNI v2 keys, any spelling the YAML takes) as the string the experiment's tasks
    carry. Raises ConfigError naming ``origin`` and the key for a value JSON cannot hold, for a
    secret, and for a config over the size a config file may have."""
    origin = Path(origin)
    if not isinstance(config, Mapping):
        raise ConfigError.single(origin, (), f"expected a mapping of experiment keys, got {type(config).__name__}")
    problems: list[Problem] = []
    plain = _plain(config, (), origin, problems)
    problems += [
        Problem(
            origin,
            path,
            "a secret in a config written in the DAG file would be stored and shown by Airflow; "
            "name an Airflow connection instead, or keep the config in a YAML file",
        )
        for path in _secrets(plain, redact(plain), ())
    ]
    if problems:
        raise ConfigError(problems)
    text = json.dumps({"origin": str(origin), "base_dir": str(base_dir), "config": plain}, ensure_ascii=False)
    source = MARK + ", " + text[1:]
    if len(source.encode()) > MAX_CONFIG_BYTES:
        raise ConfigError.single(origin, (), f"a config is at most {MAX_CONFIG_BYTES} bytes")
    return source


def read_inline(source: str) -> InlineConfig:
    """The config a string from inline_source carries (bounded, then one JSON parse)."""
    if len(source) > MAX_CONFIG_BYTES * 4 or len(source.encode()) > MAX_CONFIG_BYTES + 4096:
        raise ConfigError.single(None, (), f"an inline config is at most {MAX_CONFIG_BYTES} bytes")
    try:
        raw = json.loads(source)
        return InlineConfig(dict(raw["config"]), Path(raw["origin"]), Path(raw["base_dir"]))
    except (ValueError, KeyError, TypeError) as exc:
        raise ConfigError.single(None, (), f"not an inline experiment config ({type(exc).__name__})") from None


def _plain(value: Any, path: tuple[PathPart, ...], origin: Path, problems: list[Problem]) -> Any:
    """``value`` as JSON holds it: mappings with text keys, lists (tuples too), text, numbers,
    booleans, None; a path becomes its text. Anything else is named."""
    if isinstance(value, Mapping):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                problems.append(Problem(origin, path, f"keys are text, got {key!r:.60}"))
                continue
            out[key] = _plain(item, (*path, key), origin, problems)
        return out
    if isinstance(value, list | tuple):
        return [_plain(item, (*path, i), origin, problems) for i, item in enumerate(value)]
    if isinstance(value, PurePath):
        return str(value)
    if value is None or isinstance(value, str | int | float | bool):
        return value
    problems.append(Problem(origin, path, f"expected text, a number, a list or a mapping, got {type(value).__name__}"))
    return None


def _secrets(value: Any, masked: Any, path: tuple[PathPart, ...]) -> list[tuple[PathPart, ...]]:
    """Where ``masked`` (the config with its secrets masked) differs from ``value``."""
    if isinstance(value, dict) and isinstance(masked, dict):
        return [p for key in value for p in _secrets(value[key], masked.get(key), (*path, key))]
    if isinstance(value, list) and isinstance(masked, list):
        return [p for i, (a, b) in enumerate(zip(value, masked, strict=False)) for p in _secrets(a, b, (*path, i))]
    return [] if value == masked else [path]

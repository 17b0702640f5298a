"""Secret inputs kept sealed in the experiment store.

A run's input rendered from ``{{ conn.x.password }}`` or a secret Variable was kept in the
store in clear text, where anyone given the store reads it: optuna-dashboard, a PostgreSQL
store's readers, its backups. Airflow keeps the same value Fernet-encrypted. So a secret input's
value is sealed before it is written (``{"sealed": <token>}``) and opened only where a trial is
handed it, with Airflow's own key.

The core never imports Airflow: the key comes through a ``Sealer`` the Airflow side installs
(trialflow.from_airflow.fernet, with Airflow's ``[core] fernet_key``). A process with no sealer
(the command line, a test, a tool reading the store) sees a sealed value as ``SealedValue``: it
shows as ``***``, it masks nothing and it refuses to reach a trial, saying why. Values written
before this (in clear) read back as they were; sealing them needs the key, so they are not
migrated: a new run seals its own.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Protocol

#: The key a sealed value is kept under (a dict of one key, never a value an input can be: an
#: input is a string, number, boolean, list or a dict a person wrote, checked by trialflow.trial.inputs).
SEALED_KEY = "__trialflow_sealed__"


class SealingUnavailable(RuntimeError):
    """No key to seal or open a secret input with here."""


class Sealer(Protocol):
    """Seals text (a token that names nothing of it) and opens what it sealed."""

    def seal(self, text: str) -> str: ...

    def unseal(self, token: str) -> str: ...


class SealedValue(str):
    """A sealed input this process cannot open: shown as ``***``, and refused where a trial would
    be handed it (trialflow.trial.inputs.inputs_env)."""


_installed: Sealer | None = None


def install(sealer: Sealer | None) -> None:
    """Seal and open with ``sealer`` in this process (None: none again)."""
    global _installed
    _installed = sealer


def installed() -> Sealer | None:
    return _installed


def seal(value: Any) -> dict[str, str]:
    """``value`` as the store keeps a secret input (SealingUnavailable without a sealer)."""
    if _installed is None:
        raise SealingUnavailable(
            "a secret input is kept only encrypted, and this process has no key to seal it with "
            "(Airflow's [core] fernet_key, where the start step runs)"
        )
    return {SEALED_KEY: _installed.seal(json.dumps(value, ensure_ascii=False))}


def is_sealed(raw: Any) -> bool:
    return isinstance(raw, Mapping) and len(raw) == 1 and isinstance(raw.get(SEALED_KEY), str)


def opened(raw: Any) -> Any:
    """A stored input as a trial gets it: a sealed one opened, else ``SealedValue`` (no sealer,
    or a key that does not open it: Airflow's key was changed)."""
    if not is_sealed(raw):
        return raw
    token = str(raw[SEALED_KEY])
    if _installed is None:
        return SealedValue(token)
    try:
        return json.loads(_installed.unseal(token))
    except Exception:  # a token this key did not seal: the value is not to be had here
        return SealedValue(token)

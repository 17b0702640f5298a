"""What Airflow's secrets masker knows, asked by the Airflow layer for the core.

A task's secrets masker holds every connection password and sensitive Variable the task read
(a template's ``{{ conn.db.password }}`` registers it as it renders) and every value given to
``mask_secret``; Airflow's own views (Rendered Template, the task log) hide them with it.
trialflow keeps a run's inputs in its store, for the trials, and shows them on its pages, its
REST API and its command line, none of which run in the task: the start step asks the masker
here which inputs are secrets and the store records their names, so every reader sees ``***``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def _redact() -> Any:
    # The Task SDK's masker, the one the task runner feeds (airflow>=3.3 has it here; the old
    # airflow.sdk.execution_time.secrets_masker only re-exports it with a deprecation warning).
    from airflow.sdk._shared.secrets_masker import redact

    return redact


def masked_names(values: Mapping[str, Any] | None) -> list[str]:
    """The names of ``values`` that Airflow's masker hides: a value it knows as a secret (or
    holding one), or any value under a name it calls sensitive (``password``, ``token``...)."""
    if not values:
        return []
    redact = _redact()
    return sorted(name for name, value in values.items() if redact(value, name) != value)


def masked_text(text: str) -> str:
    """``text`` as Airflow's masker of this process would show it."""
    redacted = _redact()(text)
    return redacted if isinstance(redacted, str) else text

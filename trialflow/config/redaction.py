"""Masking secrets in a config as it is shown (``trialflow convert``, ``render``, the pages).

The config models already keep passwords and tokens as secret fields; this masks by key too,
however deep, so a plug-in platform's own secret keys are masked without it saying so.
"""

from __future__ import annotations

import re
from typing import Any

REDACTED = "***"
_SECRET_KEY = re.compile(r"(pass(word|phrase)?|token|secret|api[_-]?key|access[_-]?key|credential)", re.I)


def redact(value: Any, key: str = "") -> Any:
    """Mask values whose key names a secret, however deep they sit."""
    if isinstance(value, dict):
        return {k: redact(v, str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v, key) for v in value]
    if key and _SECRET_KEY.search(key) and value not in (None, ""):
        return REDACTED
    return value

"""Masking secrets in a config as it is shown (``trialflow convert``, ``render``, the pages).

The config models already keep passwords and tokens as secret fields; this masks by key too,
however deep, so a plug-in platform's own secret keys are masked without it saying so. And
inside values: a key says nothing about ``trialCommand: API_TOKEN=abc python t.py --password
x``, a ``https://user:pass@host`` address or a folder named ``code_token=abc``, so every string
is masked where it assigns to, passes a flag named like, or carries in a URL, a secret.
"""

from __future__ import annotations

import re
from typing import Any

REDACTED = "***"
# (AccountKey, SharedAccessSignature: an Azure storage connection string's, which an abfs://
# store's connection holds and its errors may repeat.)
_SECRET_WORDS = (
    r"pass(?:word|phrase|wd)?|token|secret|api[_-]?key|access[_-]?key|private[_-]?key|auth|credentials?"
    r"|account[_-]?key|shared[_-]?access[_-]?(?:key|signature)"
)
_SECRET_KEY = re.compile(rf"({_SECRET_WORDS})", re.I)
# A name whose words (split at _ . -) include a secret word: API_TOKEN, AWS_SECRET_ACCESS_KEY,
# code_token, db-password; not tokenizer, --passes, author. Each repetition ends at a
# separator, so a failed try costs one pass over the name.
_NAME = rf"(?:[A-Za-z0-9]+[_.-])*?(?:{_SECRET_WORDS})(?:[_.-][A-Za-z0-9]+)*"
# A value: a quoted string (no escapes inside: shell's single quotes; a double-quoted one ends
# at its first unescaped quote) or a run without spaces. Each alternative consumes what the
# others cannot, so matching is linear in the string's length.
_VALUE = r"""(?:'[^']*'|"(?:[^"\\]|\\.)*"|[^\s'"]+)"""
# NAME=value where NAME names a secret (API_TOKEN=..., AWS_SECRET_ACCESS_KEY=..., code_token=...).
_ASSIGNMENT = re.compile(rf"(?<![\w.-])({_NAME}=)({_VALUE})", re.I)
# --password value, --api-key=value, --db-password 'x y' (not a next flag: --token -v).
_FLAG = re.compile(rf"(?<![\w-])(--?{_NAME}(?:=|\s+))(?!-)({_VALUE})", re.I)
# scheme://user:password@host and scheme://token@host. The scheme is bounded (a run of
# scheme characters with no "://" after it is given up after 32, not rescanned from each start).
_USERINFO = re.compile(r"(?<![a-z0-9+.-])([a-z][a-z0-9+.-]{0,31}://)([^\s/@:?#]{0,512})(?::([^\s/@?#]{0,512}))?@", re.I)


# An HTTP credential as a command or an error writes it: "Authorization: Basic dXNl...",
# "Bearer eyJ..." (curl -H, a request's repr). One token after the word, bounded.
_HTTP_CREDENTIAL = re.compile(
    r"(?<![\w-])((?:authorization\s*[:=]\s*(?:(?:basic|bearer|token)\s+)?)|(?:bearer\s+))([^\s'\"]{1,4096})", re.I
)


def mask_text(text: str) -> str:
    """``text`` with the secrets it carries masked: assignments and flags whose name says
    secret, an HTTP credential (``Authorization: ...``, ``Bearer ...``), and the userinfo of
    every URL (``user:***@``; a lone token before ``@`` is masked whole)."""
    text = _HTTP_CREDENTIAL.sub(lambda m: m.group(1) + REDACTED, text)
    text = _ASSIGNMENT.sub(lambda m: m.group(1) + REDACTED, text)
    text = _FLAG.sub(lambda m: m.group(1) + REDACTED, text)
    return _USERINFO.sub(
        lambda m: f"{m.group(1)}{m.group(2)}:{REDACTED}@" if m.group(3) is not None else f"{m.group(1)}{REDACTED}@",
        text,
    )


#: Keys whose values are shown as they are: a search space's choices are parameters a person
#: and the add-trial check must see exactly (a choice "token=a" is a value, not a secret).
_AS_IS = frozenset({"searchSpace"})


def redact(value: Any, key: str = "") -> Any:
    """Mask values whose key names a secret, however deep they sit, and the secrets inside
    every other string (``mask_text``)."""
    if key in _AS_IS:
        return value
    if isinstance(value, dict):
        return {k: redact(v, str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v, key) for v in value]
    if key and _SECRET_KEY.search(key) and value not in (None, ""):
        return REDACTED
    if isinstance(value, str):
        return mask_text(value)
    return value

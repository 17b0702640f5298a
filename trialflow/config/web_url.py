"""``trialWebUrl``: a template of a trial's page on its platform, checked and filled safely.

The template comes from a config file and is filled in the worker and in the api-server on
every page view, so it must not be a program: ``str.format`` would follow attribute and index
access (``{trial_id.__class__}``) and honour a format spec (``{trial_id:>300000000}`` builds a
300 MB string). Only the documented placeholders, bare, in an http(s) address.
"""

from __future__ import annotations

import string
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

#: The trial handle's fields a template may name (docs/topics/pages.md, "One trial").
PLACEHOLDERS = ("trial_id", "experiment_id", "name", "namespace", "host", "trial_dir")
MAX_TEMPLATE = 2048


class WebUrlError(ValueError):
    """A trialWebUrl that is not an http(s) address with the documented placeholders."""


def _parts(template: str) -> list[tuple[str, str | None]]:
    """(literal text, placeholder or None) pieces; WebUrlError for anything but bare names."""
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:  # unbalanced braces
        raise WebUrlError(f"{exc} (write a literal brace as '{{{{' or '}}}}')") from None
    out: list[tuple[str, str | None]] = []
    for literal, field, spec, conversion in parsed:
        if field is None:
            out.append((literal, None))
            continue
        if field not in PLACEHOLDERS:
            raise WebUrlError(
                f"{{{field}}} is not a placeholder; use only {', '.join('{' + p + '}' for p in PLACEHOLDERS)}"
                " (no attribute, index or positional fields)"
            )
        if spec or conversion:
            raise WebUrlError(f"{{{field}}} may not carry a format spec or conversion ('!', ':')")
        out.append((literal, field))
    return out


def check_web_url(template: str) -> str:
    """The template, or WebUrlError saying what is wrong with it."""
    if len(template) > MAX_TEMPLATE:
        raise WebUrlError(f"longer than {MAX_TEMPLATE} characters")
    if not template.lower().startswith(("http://", "https://")):
        raise WebUrlError("expected an http:// or https:// address")
    _parts(template)
    return template


def fill_web_url(template: str, handle: Mapping[str, Any]) -> str | None:
    """The template with each placeholder replaced by the handle's field, URL-quoted (absent
    fields are empty); None for a template :func:`check_web_url` refuses (one stored before
    the check existed)."""
    try:
        check_web_url(template)
        parts = _parts(template)
    except WebUrlError:
        return None
    return "".join(
        literal + ("" if field is None or handle.get(field) is None else quote(str(handle[field]), safe=""))
        for literal, field in parts
    )

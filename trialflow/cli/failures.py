"""What a `trialflow` command says when it fails: the message alone, a database's error
said in a sentence with its secrets masked, and its exit status."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass


def _fail(exc: Exception) -> int:
    print(str(exc), file=sys.stderr)
    return 1


def _database_failure(exc: Exception) -> Exception | None:
    """What to say for SQLAlchemy's errors, or None for any other. SQLAlchemy is looked up,
    not imported: a command that never imported it cannot have raised its errors, and its
    import (0.4 s) is kept off the commands that do not read a store (a warm `trialflow run`
    triggers before anything imports it)."""
    sa = sys.modules.get("sqlalchemy")
    if sa is None:
        return None
    if isinstance(exc, sa.exc.ArgumentError):  # its text repeats the URL, password and all
        return ValueError("the store URL is not one SQLAlchemy reads (e.g. sqlite:///path/experiments.db)")
    if isinstance(exc, sa.exc.DBAPIError):  # unreachable, refused, locked, not a database: the driver says which
        return ConnectionError(f"the store's database failed: {_driver_said(exc)}")
    return None


def _driver_said(exc: Exception) -> str:
    """The first line of what the database driver said (an empty one named by its type),
    with any secret in it masked (a driver may echo the connection string), then bounded.
    Bounded first, a URL cut before its ``@`` would no longer read as one and keep the start of
    its password; so the text is capped before masking only at a space (a secret holds none),
    and a first word longer than the cap is not said at all."""
    from trialflow.config.redaction import mask_text

    orig = getattr(exc, "orig", None) or exc
    said = str(orig)
    if len(said) > 4096:
        words = said[:4096].rsplit(None, 1)
        said = words[0] if len(words) == 2 else ""
    first = next(iter(said.strip().splitlines()), "") or type(orig).__name__
    return mask_text(first)[:300]

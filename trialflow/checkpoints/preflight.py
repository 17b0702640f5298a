"""Whether a ``file://`` checkpoint store can be written from here, said before a run.

``checkpoints.store: file:///nonexistent/dir`` validated, and every trial of the run then
failed to keep its checkpoints. An object store's bucket is the deployment's to reach (its
connection is read where Airflow runs); a folder can be looked at: it, or the nearest folder
above it that exists (trialflow makes the rest), must be a folder this process may write.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import unquote, urlsplit


def file_store_problem(url: str) -> str | None:
    """Why the ``file://`` store at ``url`` cannot be written from here, or None (also for any
    other scheme: this says nothing of buckets)."""
    parts = urlsplit(url)
    if parts.scheme.lower() != "file":
        return None
    text = unquote(parts.netloc + parts.path)
    if "\x00" in text:  # pathlib's exists() says False for it, and the copy would fail later
        return f"checkpoints.store {url}: its path holds a NUL byte, which no folder's name can"
    folder = Path(text)
    if not folder.is_absolute():
        return f"checkpoints.store {url}: expected an absolute path (file:///path)"
    existing = folder
    try:
        while not existing.exists() and existing != existing.parent:
            existing = existing.parent
    except OSError as exc:  # a folder above it this user may not look into
        return f"checkpoints.store {url}: {existing} cannot be looked at here ({exc.strerror})"
    if not existing.is_dir():
        return f"checkpoints.store {url}: {existing} is not a folder, so no checkpoint can be kept under it"
    if not os.access(existing, os.W_OK | os.X_OK):
        made = "" if existing == folder else f" ({folder} does not exist and cannot be made there)"
        return f"checkpoints.store {url}: {existing} is not writable here{made}"
    return None

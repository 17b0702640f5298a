"""The platform registry's home is trialflow.config.registry (configs validate against it);
this name stays for plugins written against it."""

from __future__ import annotations

from trialflow.config.registry import (  # noqa: F401
    ENTRY_POINT_GROUP,
    PlatformEntry,
    PlatformUnavailable,
    get_platform_entry,
    platform_entries,
)

"""Where an experiment and its trials are in MLflow, for the pages: the runs' addresses the
tracking outbox recorded (trialflow.tracking.outbox; never a credential), and whether the
tracking server is away. One indexed read each; a store that never tracked has no rows."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from trialflow.queries.tables import study_attrs, study_id_of
from trialflow.store.tables import TRACKING
from trialflow.tracking.content import EXPERIMENT_KEY
from trialflow.tracking.sync import AWAY_ATTR


def run_links(conn: sa.Connection, study_id: int, keys: Iterable[str]) -> dict[str, str]:
    """The MLflow run pages of these outbox keys (trial indexes as text, ``experiment``)."""
    wanted = list(keys)
    if not wanted:
        return {}
    rows = conn.execute(
        sa.select(TRACKING.c.run_key, TRACKING.c.run_url).where(
            TRACKING.c.study_id == study_id, TRACKING.c.run_key.in_(wanted), TRACKING.c.run_url.is_not(None)
        )
    )
    return {key: url for key, url in rows if isinstance(url, str) and url.startswith(("http://", "https://"))}


def experiment_tracking(engine: Engine, experiment_id: str) -> dict[str, Any] | None:
    """The experiment's MLflow run page and, while the server is away, since when and why; None
    for an experiment that is not tracked (or whose run is not made yet, and the server is not
    known to be away)."""
    with engine.connect() as conn:
        sid = study_id_of(conn, experiment_id)
        links = run_links(conn, sid, [EXPERIMENT_KEY])
        away = study_attrs(conn, [sid], (AWAY_ATTR,)).get(sid, {}).get(AWAY_ATTR)
    if not links and not away:
        return None
    return {
        "run_url": links.get(EXPERIMENT_KEY),
        "away": {"since": away.get("since"), "error": str(away.get("error") or "")[:300]}
        if isinstance(away, dict)
        else None,
    }

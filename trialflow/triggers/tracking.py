"""TrackingTrigger: after a run's end, tries again until the MLflow server has every result.

A tracking server that is down when an experiment's run ends must still get what it missed
(trialflow.tracking.sync: level-triggered, nothing sent twice). This trigger makes a pass, and
another after a pause that doubles up to a minute, in the triggerer (no worker slot), until a
pass leaves nothing to send, or until ``until`` (epoch seconds), when it says what is kept.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

#: Seconds between two passes at first, and at most.
FIRST_PAUSE = 5.0
LONGEST_PAUSE = 60.0
#: Seconds one pass may take.
PASS_BUDGET = 60.0


class TrackingTrigger(BaseTrigger):
    """Pass until MLflow has the experiment's every result (see module).

    :param store_conn_id: the ``trialflow`` connection of the experiment store.
    :param experiment_id: the experiment.
    :param status: the MLflow status its run ends with (FINISHED, FAILED).
    :param until: epoch seconds after which it stops trying.
    """

    def __init__(self, *, store_conn_id: str, experiment_id: str, status: str, until: float):
        super().__init__()
        self.store_conn_id, self.experiment_id = store_conn_id, experiment_id
        self.status, self.until = status, until

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "store_conn_id": self.store_conn_id,
                "experiment_id": self.experiment_id,
                "status": self.status,
                "until": self.until,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from trialflow.from_airflow.secrets import masked_text
        from trialflow.hooks import airflow_connections
        from trialflow.hooks.experiment_store import ExperimentStoreHook
        from trialflow.tracking.runner import Tracking, mlflow_config
        from trialflow.tracking.target import aresolve
        from trialflow.ui.links import tracking_links

        try:
            store = await asyncio.to_thread(lambda: ExperimentStoreHook(self.store_conn_id).get_conn())
            chosen = await asyncio.to_thread(mlflow_config, store, self.experiment_id)
            if chosen is None:
                yield TriggerEvent({"status": "NOT_TRACKED", "message": "the experiment names no MLflow server"})
                return
            name = await asyncio.to_thread(store.experiment_attr, self.experiment_id, "experiment_name")
            target = await aresolve(chosen, str(name or self.experiment_id), airflow_connections())
        except Exception as exc:  # not configured here: said, never a failed run
            yield TriggerEvent({"status": "NOT_TRACKED", "message": masked_text(str(exc))})
            return
        tracking = Tracking.open(store, self.experiment_id, None, target=target)
        assert tracking is not None
        links = tracking_links(self.experiment_id)
        pause = FIRST_PAUSE
        while True:
            try:
                report = await asyncio.to_thread(tracking.sync, links, masked_text, self.status, PASS_BUDGET)
            except Exception as exc:  # the store busy, say: the next pass tries again
                self.log.warning("an MLflow pass failed; trying again: %s", exc)
                report = None
            if report is not None and report.passed and not report.error and not report.pending:
                yield TriggerEvent({"status": "DONE", "sent": report.sent})
                return
            if time.time() >= self.until:
                kept = report.pending if report is not None else "some"
                message = (
                    f"MLflow did not take experiment {self.experiment_id}'s last results ({kept} run(s) kept): "
                    f"`trialflow sync-mlflow {self.experiment_id}` sends them"
                )
                yield TriggerEvent({"status": "GAVE_UP", "message": message})
                return
            if report is not None and report.error:
                self.log.info("MLflow: %s; trying again in %.0f s", report.error, pause)
            await asyncio.sleep(pause)
            pause = min(pause * 2, LONGEST_PAUSE)

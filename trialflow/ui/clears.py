"""A person's clear of a trial task, recorded in the store the moment Airflow's API takes it.

A clear stops the trial (docs/topics/airflow-ui.md, "What each button does"): its task gets a new try, which
reports the stopped trial and is skipped. Airflow tells a running task of the clear only through
the task's process: the worker's ``on_kill``, or the trigger's. At the hand-off from the worker
to the triggerer neither may run, measured: a task cleared as it deferred had its deferral
refused (409), its process was terminated without ``on_kill`` ("Failed to report terminal task
state to supervisor"), and its next try re-attached to the trial and followed it for ever,
RUNNING in the store. The run's reconciler cannot see it either (the task is alive again).

Airflow's listener hooks have no clear, so this middleware of the api-server watches the two
clear routes (``POST /api/v2/dags/{dag_id}/clearTaskInstances``, the Grid's button, and
``POST /api/v2/dags/{dag_id}/dagRuns/{run_id}/clear``) and, once Airflow answered 200 to a clear
that was not a dry run, writes the stop request beside every trial it cleared
(trialflow.steering.stop_task_trial, as the listener does for a mark): whoever follows the trial
(the old try, or the new try that re-attaches) stops it at its next poll.

The decisions are pure (:func:`cleared_tasks`); the middleware only buffers the request and the
response (both bounded) and hands them over. It never changes or fails the person's request.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

#: Request and response bodies read at most (a clear's request is a few hundred bytes; its
#: response lists the cleared task instances). Past these the clear is passed on untouched.
MAX_REQUEST_BYTES = 256 * 1024
MAX_RESPONSE_BYTES = 16 * 1024 * 1024
#: The trial's message, as the worker's and the trigger's on_kill write it for a clear.
CLEARED = "stopped from Airflow: its task was cleared"

_TASKS = re.compile(r"/api/v2/dags/(?P<dag>[^/]{1,250})/clearTaskInstances/?$")
_RUN = re.compile(r"/api/v2/dags/(?P<dag>[^/]{1,250})/dagRuns/(?P<run>[^/]{1,250})/clear/?$")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


@dataclass(frozen=True)
class ClearedTask:
    """One trial task a clear reset (``map_index`` None: every trial task of the run)."""

    dag_id: str
    run_id: str
    task_id: str
    map_index: int | None


def clear_route(method: str, path: str) -> bool:
    """Whether a request is one of Airflow's clears (the middleware looks at nothing else)."""
    return method == "POST" and bool(_TASKS.search(path) or _RUN.search(path))


def cleared_tasks(path: str, request: bytes, status: int, response: bytes) -> list[ClearedTask]:
    """The trial tasks a clear reset, from its route, its request and Airflow's answer; none for
    a dry run, a refused or failed clear (anything but 200), a body that is no JSON object.

    ``clearTaskInstances`` answers with the task instances it cleared (whatever the request's
    filters chose: only_failed, upstream, downstream, dates); a DAG run's clear answers with the
    run, and clears all of its tasks unless ``only_failed`` or ``only_new``."""
    from trialflow.task_ids import trial_task_group

    if status != 200:
        return []
    body = _json_object(request)
    if body is None or body.get("dry_run", True) is not False:
        return []  # Airflow's default is a dry run: nothing was cleared
    found: list[ClearedTask] = []
    run = _RUN.search(path)
    if run is not None:
        if body.get("only_failed") or body.get("only_new"):
            return []  # a running trial's task is neither failed nor new
        return [ClearedTask(run["dag"], run["run"], "", None)]
    tasks = _TASKS.search(path)
    answer = _json_object(response)
    if tasks is None or answer is None or not isinstance(answer.get("task_instances"), list):
        return []
    for ti in answer["task_instances"]:
        if not isinstance(ti, dict):
            continue
        task_id, run_id, map_index = ti.get("task_id"), ti.get("dag_run_id") or ti.get("run_id"), ti.get("map_index")
        if not isinstance(task_id, str) or not isinstance(run_id, str) or type(map_index) is not int:
            continue
        if map_index >= 0 and trial_task_group(task_id)[0]:
            found.append(ClearedTask(str(ti.get("dag_id") or tasks["dag"]), run_id, task_id, map_index))
    return found


def _json_object(data: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(data)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def record_clears(cleared: list[ClearedTask]) -> int:
    """Write the stop request of every trial the clear reset that still runs; returns how many.
    Never raises (the person's clear has happened whatever the store says)."""
    if not cleared:
        return 0
    try:
        from trialflow import steering
        from trialflow.steering import cleared_starts
        from trialflow.task_ids import trial_task_group
        from trialflow.ui.access import action_store

        store = action_store()
        asked = 0
        # First: a start still waiting for its turn must not take a slot this clear frees.
        tasks = [
            (t.dag_id, t.run_id, t.map_index, None if t.map_index is None else trial_task_group(t.task_id)[1])
            for t in cleared
        ]
        for mark in cleared_starts.marks_of(tasks):
            cleared_starts.mark_cleared(store, mark.dag_id, mark.run_id, mark.map_indexes, mark.group)
        for task in cleared:
            if task.map_index is None:
                asked += len(steering.stop_run_trials(store, task.dag_id, task.run_id, CLEARED))
                continue
            group = trial_task_group(task.task_id)[1]
            if steering.stop_task_trial(store, task.dag_id, task.run_id, task.map_index, CLEARED, group=group):
                asked += 1
        if asked:
            log.info("a clear asked %d trial(s) to stop", asked)
        return asked
    except Exception:
        log.exception("could not record the stop of the cleared trials")
        return 0


class ClearedTrials:
    """ASGI middleware (a plugin's ``fastapi_root_middlewares``): see the module's docstring."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]]):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http" or not clear_route(str(scope.get("method")), str(scope.get("path"))):
            await self.app(scope, receive, send)
            return
        request, replay, whole = await _buffered(receive)
        status = 0
        response = bytearray()
        kept = True

        async def sending(message: Message) -> None:
            nonlocal status, kept
            if message.get("type") == "http.response.start":
                status = int(message.get("status", 0))
            elif message.get("type") == "http.response.body" and kept:
                response.extend(message.get("body", b""))
                if len(response) > MAX_RESPONSE_BYTES:
                    kept = False
                    response.clear()
            await send(message)

        await self.app(scope, replay, sending)
        if whole and kept:
            cleared = cleared_tasks(str(scope.get("path")), request, status, bytes(response))
            if cleared:
                import asyncio  # here: the plugin module is imported by every Airflow component

                await asyncio.to_thread(record_clears, cleared)


async def _buffered(receive: Receive) -> tuple[bytes, Receive, bool]:
    """The request's body (up to MAX_REQUEST_BYTES), a ``receive`` that hands the app every
    message read, then the rest, and whether the whole body was read."""
    messages: list[Message] = []
    body = bytearray()
    while True:
        message = await receive()
        messages.append(message)
        if message.get("type") != "http.request":
            whole = False
            break
        body.extend(message.get("body", b""))
        if len(body) > MAX_REQUEST_BYTES:
            whole = False
            break
        if not message.get("more_body", False):
            whole = True
            break

    async def replay() -> Message:
        if messages:
            return messages.pop(0)
        return await receive()

    return bytes(body), replay, whole

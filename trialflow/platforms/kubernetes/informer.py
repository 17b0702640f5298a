"""One watch per kind: the cache every followed trial of an experiment reads.

``Informer`` is the watch side of "watch or poll": one list + watch per
(cluster, namespace, kind, experiment) feeds a cache that every trial of that
experiment in the process reads, so following N trials costs one stream, not N
requests per poll interval. It resumes from the last resourceVersion and
relists when the server answers 410 Gone (the version fell out of its window).
The stream itself is kubernetes_asyncio's ``Watch``.
"""

from __future__ import annotations

import asyncio
import random
import time
import weakref
from dataclasses import dataclass, field
from typing import Any

from trialflow.platforms.kubernetes.client import (
    POOL,
    REQUEST_TIMEOUT,
    CustomObjects,
    KubernetesError,
    Resource,
    describe_api_error,
)

WATCH_TIMEOUT_SECONDS = 240
#: An informer nobody asked for this long ends its watch (a long-lived triggerer would
#: otherwise keep one stream per experiment it ever followed); the next ask relists.
IDLE_SECONDS = 300
RELIST_DELAYS = (0.5, 1.0, 2.0, 5.0)


@dataclass
class Informer:
    """A cache of one kind's objects of one experiment, kept by list + watch.

    ``get`` answers from the cache once the first list has arrived. Deleted objects are
    kept (their last state, with trialflow's cancel annotation) so a follower learns why
    its trial is gone. Errors other than 410 back off and relist; 410 relists at once.
    """

    objects_api: CustomObjects
    resource: Resource
    label_selector: str
    objects: dict[str, dict[str, Any]] = field(default_factory=dict)
    deleted: dict[str, dict[str, Any]] = field(default_factory=dict)
    resource_version: str | None = None
    relists: int = 0
    gone: int = 0  # 410 answers seen
    error: str | None = None
    _synced: asyncio.Event = field(default_factory=asyncio.Event)
    _changed: dict[str, asyncio.Event] = field(default_factory=dict)
    last_used: float = field(default_factory=time.monotonic)
    _task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"informer {self.resource.plural}")

    async def wait_synced(self, timeout: float = 30.0) -> None:
        await asyncio.wait_for(self._synced.wait(), timeout)

    def get(self, name: str) -> tuple[dict[str, Any] | None, bool]:
        """(object or its last state before deletion, deleted?)"""
        if name in self.objects:
            return self.objects[name], False
        if name in self.deleted:
            return self.deleted[name], True
        return None, False

    async def changed(self, name: str, seen_version: str | None, timeout: float) -> None:
        """Return when ``name`` has a version other than ``seen_version`` (at once if it has
        already), or after ``timeout`` seconds."""
        obj, _ = self.get(name)
        if obj is not None and obj["metadata"].get("resourceVersion") != seen_version:
            return
        event = self._changed.setdefault(name, asyncio.Event())
        event.clear()  # no await since the check above: no change can slip between them
        try:
            await asyncio.wait_for(event.wait(), timeout)
        except TimeoutError:
            pass

    async def _list(self) -> None:
        api = await self.objects_api.custom_api()
        POOL.requests += 1
        listing = await api.list_namespaced_custom_object(
            self.resource.group,
            self.resource.version,
            self.objects_api.namespace,
            self.resource.plural,
            label_selector=self.label_selector,
            _request_timeout=REQUEST_TIMEOUT,
        )
        fresh = {o["metadata"]["name"]: o for o in listing.get("items", [])}
        for name, obj in self.objects.items():
            if name not in fresh:
                self.deleted[name] = obj
        for event in self._changed.values():
            event.set()
        self.objects = fresh
        self.resource_version = listing["metadata"]["resourceVersion"]
        self.relists += 1
        self._synced.set()

    async def _watch_once(self) -> None:
        """One watch request (kubernetes_asyncio's Watch), until the server ends it; its 410 Gone
        (an ERROR event or the request's own status) raises ApiException(410)."""
        from kubernetes_asyncio import watch

        api = await self.objects_api.custom_api()
        POOL.requests += 1
        async with watch.Watch() as stream:
            async for event in stream.stream(
                api.list_namespaced_custom_object,
                self.resource.group,
                self.resource.version,
                self.objects_api.namespace,
                self.resource.plural,
                label_selector=self.label_selector,
                allow_watch_bookmarks=True,
                resource_version=self.resource_version or "",
                timeout_seconds=WATCH_TIMEOUT_SECONDS,
                _request_timeout=WATCH_TIMEOUT_SECONDS + 30,
            ):
                self._apply({"type": event["type"], "object": event["raw_object"]})

    def _apply(self, event: dict[str, Any]) -> None:
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise _Gone()
            raise KubernetesError(f"watch error: {obj.get('message')}")
        rv = obj.get("metadata", {}).get("resourceVersion")
        if kind == "BOOKMARK":
            self.resource_version = rv or self.resource_version
            return
        name = obj["metadata"]["name"]
        if name in self._changed:
            self._changed[name].set()
        if kind == "DELETED":
            self.objects.pop(name, None)
            self.deleted[name] = obj
        else:
            self.objects[name] = obj
            self.deleted.pop(name, None)
        self.resource_version = rv or self.resource_version

    async def _run(self) -> None:
        """List, then watch from the list's resourceVersion, forever (until idle). A 410 relists
        at once; any other failure relists after a jittered backoff that resets on success.
        Not a tenacity retry: the loop never gives up, and what a failure changes (relist or
        resume) depends on which one it was."""
        from kubernetes_asyncio.client.exceptions import ApiException

        failures = 0
        need_list = self.resource_version is None  # a restarted informer resumes where it was
        while True:
            if time.monotonic() - self.last_used > IDLE_SECONDS:
                self.resource_version = None  # stop; whoever asks next starts from a fresh list
                self._synced.clear()
                return
            try:
                if need_list:
                    await self._list()
                    need_list = False
                await self._watch_once()
                failures = 0
                continue
            except asyncio.CancelledError:
                raise
            except _Gone:
                self.gone += 1
                need_list = True
                continue
            except ApiException as exc:
                if exc.status == 410:
                    self.gone += 1
                    need_list = True
                    continue
                self.error = describe_api_error(exc, self.objects_api.cluster, f"watching {self.resource.plural}")
            except Exception as exc:  # a dropped stream, a restarted API server
                self.error = str(exc)
            failures += 1
            need_list = True
            await asyncio.sleep(RELIST_DELAYS[min(failures, len(RELIST_DELAYS)) - 1] * (1 + random.random() / 4))

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass


class _Gone(Exception):
    """The watch's resourceVersion is older than the server keeps (410 Gone)."""


class Informers:
    """One Informer per (event loop, cluster, namespace, kind, selector)."""

    def __init__(self) -> None:
        self._by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple, Informer]] = (
            weakref.WeakKeyDictionary()
        )

    def get(self, objects_api: CustomObjects, resource: Resource, label_selector: str) -> Informer:
        informers = self._by_loop.setdefault(asyncio.get_running_loop(), {})
        key = (objects_api.cluster, objects_api.namespace, resource, label_selector)
        informer = informers.get(key)
        if informer is None:
            informer = informers[key] = Informer(objects_api, resource, label_selector)
        informer.last_used = time.monotonic()
        informer.start()
        return informer

    async def stop_all(self) -> None:
        informers = self._by_loop.pop(asyncio.get_running_loop(), {})
        for informer in informers.values():
            await informer.stop()


INFORMERS = Informers()

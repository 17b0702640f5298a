"""Talking to a Kubernetes API server: clients per event loop, one watch per kind, pod logs.

kubernetes_asyncio throughout (the triggerer is async; the synchronous calls
run on the process's background loop), with one long-lived ApiClient per
cluster per event loop so 200 followed trials share one connection pool.

``Informer`` is the watch side of "watch or poll": one list + watch per
(cluster, namespace, kind, experiment) feeds a cache that every trial of that
experiment in the process reads, so following N trials costs one stream, not N
requests per poll interval. It resumes from the last resourceVersion and
relists when the server answers 410 Gone (the version fell out of its window).
"""

from __future__ import annotations

import asyncio
import atexit
import json
import logging
import random
import time
import weakref
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Awaitable, Callable

if TYPE_CHECKING:
    from kubernetes_asyncio.client import ApiClient

log = logging.getLogger(__name__)

WATCH_TIMEOUT_SECONDS = 240
#: An informer nobody asked for this long ends its watch (a long-lived triggerer would
#: otherwise keep one stream per experiment it ever followed); the next ask relists.
IDLE_SECONDS = 300
RELIST_DELAYS = (0.5, 1.0, 2.0, 5.0)
REQUEST_TIMEOUT = 30


class KubernetesError(RuntimeError):
    """A Kubernetes call failed; the message names the cluster, the object and what to do."""


@dataclass(frozen=True)
class Resource:
    """A custom resource kind, as the API server serves it."""

    group: str
    version: str
    plural: str
    kind: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    @property
    def crd_name(self) -> str:
        return f"{self.plural}.{self.group}"


@dataclass(frozen=True)
class Cluster:
    """Where the API server is: an Airflow connection, a kubeconfig file, or the defaults."""

    conn_id: str | None = None
    kubeconfig: str | None = None

    @property
    def label(self) -> str:
        if self.conn_id:
            return f"Kubernetes connection {self.conn_id!r}"
        return f"kubeconfig {self.kubeconfig}" if self.kubeconfig else "the default kubeconfig"


#: Reads an Airflow Kubernetes connection's extras (set by trialflow.hooks.kubernetes, so
#: this module imports no Airflow).
ConnExtras = Callable[[str], Awaitable[dict[str, Any]]]
_conn_extras: ConnExtras | None = None


def set_conn_extras_reader(reader: ConnExtras) -> None:
    global _conn_extras
    _conn_extras = reader


async def _configuration(cluster: Cluster) -> Any:
    from kubernetes_asyncio import config
    from kubernetes_asyncio.client import Configuration

    conf = Configuration()
    try:
        if cluster.conn_id:
            if _conn_extras is None:
                raise KubernetesError(f"kubernetesConnId {cluster.conn_id!r} needs Airflow's cncf-kubernetes "
                                      "provider (pip install 'airflow-provider-trialflow[kubernetes]')")
            extras = await _conn_extras(cluster.conn_id)
            context = extras.get("cluster_context") or None
            if extras.get("in_cluster"):
                config.load_incluster_config(client_configuration=conf)
            elif extras.get("kube_config"):
                raw = extras["kube_config"]
                data = raw if isinstance(raw, dict) else _yaml_or_json(raw)
                await config.load_kube_config_from_dict(data, context=context, client_configuration=conf)
            else:
                await config.load_kube_config(config_file=extras.get("kube_config_path"), context=context,
                                              client_configuration=conf)
            if str(extras.get("disable_verify_ssl", "")).lower() in ("true", "1"):
                conf.verify_ssl = False
        elif cluster.kubeconfig:
            await config.load_kube_config(config_file=cluster.kubeconfig, client_configuration=conf)
        else:
            try:
                await config.load_kube_config(client_configuration=conf)
            except config.ConfigException:
                config.load_incluster_config(client_configuration=conf)
    except KubernetesError:
        raise
    except Exception as exc:  # ConfigException, FileNotFoundError, yaml errors ...
        # First line only: YAML errors quote the offending text, which may hold a token.
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise KubernetesError(f"cannot load {cluster.label}: {first}") from None
    return conf


def _yaml_or_json(text: str) -> dict[str, Any]:
    import yaml

    data = yaml.safe_load(text)
    if not isinstance(data, dict):
        raise KubernetesError("the connection's kube_config is not a kubeconfig mapping")
    return data


class ClientPool:
    """One ApiClient per (event loop, cluster): loops die (each task run has its own), and a
    client bound to a dead loop must never be reused."""

    def __init__(self) -> None:
        self._by_loop: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[Cluster, ApiClient]]" = \
            weakref.WeakKeyDictionary()
        self.requests = 0  # counted for the benchmark and tests
        self._atexit = False

    async def get(self, cluster: Cluster) -> "ApiClient":
        from kubernetes_asyncio.client import ApiClient

        clients = self._by_loop.setdefault(asyncio.get_running_loop(), {})
        client = clients.get(cluster)
        if client is None:
            client = ApiClient(await _configuration(cluster))
            clients[cluster] = client
            if not self._atexit:
                atexit.register(self._close_at_exit)
                self._atexit = True
        return client

    def _close_at_exit(self) -> None:
        """Close the clients of loops still running (the background loop's), so a process ends
        without aiohttp's unclosed-session noise."""
        for loop, clients in list(self._by_loop.items()):
            if loop.is_running() and not loop.is_closed():
                for client in list(clients.values()):
                    try:
                        asyncio.run_coroutine_threadsafe(client.close(), loop).result(2)
                    except Exception:  # exiting anyway
                        pass

    async def close(self) -> None:
        clients = self._by_loop.pop(asyncio.get_running_loop(), {})
        for client in clients.values():
            await client.close()


POOL = ClientPool()


def describe_api_error(exc: Exception, cluster: Cluster, what: str) -> str:
    """A sentence for an ApiException or a connection error, without credentials in it."""
    status = getattr(exc, "status", None)
    if status is None:
        return f"{what}: cannot reach the API server of {cluster.label}: {exc}"
    reason = getattr(exc, "reason", "")
    try:
        message = json.loads(getattr(exc, "body", "") or "{}").get("message", "")
    except ValueError:
        message = ""
    if status == 401:
        return f"{what}: the API server of {cluster.label} refused the credentials (401 Unauthorized)"
    if status == 403:
        return f"{what}: not allowed on {cluster.label} (403): {message}"
    return f"{what}: {status} {reason}: {message}".rstrip(": ")


# -- custom objects ------------------------------------------------------------------------


_RAISE = object()  # _request's default: a 404 is an error too


def _transport_errors() -> tuple[type[BaseException], ...]:
    """What a call raises when the API server cannot be reached or drops the connection (aiohttp's
    own errors are not all OSErrors)."""
    import aiohttp

    return OSError, asyncio.TimeoutError, aiohttp.ClientError


class CustomObjects:
    """The calls the platforms make, with the content types real API servers need."""

    def __init__(self, cluster: Cluster, namespace: str):
        self.cluster = cluster
        self.namespace = namespace

    async def _api(self) -> Any:
        from kubernetes_asyncio.client import CustomObjectsApi

        return CustomObjectsApi(await POOL.get(self.cluster))

    async def _core(self) -> Any:
        from kubernetes_asyncio.client import CoreV1Api

        return CoreV1Api(await POOL.get(self.cluster))

    async def create(self, resource: Resource, body: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        """Create ``body``; if it exists already, return the existing object (re-attach).
        Returns (object, created)."""
        from kubernetes_asyncio.client.exceptions import ApiException

        api = await self._api()
        name = body["metadata"]["name"]
        POOL.requests += 1
        try:
            return await api.create_namespaced_custom_object(
                resource.group, resource.version, self.namespace, resource.plural, body,
                _request_timeout=REQUEST_TIMEOUT), True
        except ApiException as exc:
            if exc.status == 409:
                return await self.get(resource, name) or {}, False
            if exc.status == 404:
                raise KubernetesError(
                    f"{resource.kind} {name}: the API server of {self.cluster.label} does not serve "
                    f"{resource.api_version} {resource.plural} in namespace {self.namespace} — is the "
                    f"{resource.kind} operator (its CRD {resource.crd_name}) installed, and does the namespace "
                    "exist?") from None
            raise KubernetesError(describe_api_error(exc, self.cluster, f"creating {resource.kind} {name}")) from None
        except _transport_errors() as exc:
            raise KubernetesError(describe_api_error(exc, self.cluster, f"creating {resource.kind} {name}")) from None

    async def _request(self, what: str, call: Callable[[], Awaitable[Any]], gone: Any = _RAISE) -> Any:
        """One API call: counted, its errors as KubernetesError naming ``what``; a 404 returns
        ``gone`` when one is given (deleted objects are expected after a cancel or cleanup)."""
        from kubernetes_asyncio.client.exceptions import ApiException

        POOL.requests += 1
        try:
            return await call()
        except ApiException as exc:
            if exc.status == 404 and gone is not _RAISE:
                return gone
            raise KubernetesError(describe_api_error(exc, self.cluster, what)) from None
        except _transport_errors() as exc:
            raise KubernetesError(describe_api_error(exc, self.cluster, what)) from None

    async def served_plurals(self, resource: Resource) -> set[str] | None:
        """The resources the API server serves in ``resource``'s group version (its discovery
        document), or None when it serves none: the CRD is not installed."""
        client = await POOL.get(self.cluster)
        found = await self._request(f"checking that {resource.api_version} is served", lambda: client.call_api(
            f"/apis/{resource.api_version}", "GET", auth_settings=["BearerToken"],
            response_types_map={200: "object"}, _return_http_data_only=True,
            _request_timeout=REQUEST_TIMEOUT), gone=None)
        return None if found is None else {r.get("name") for r in found.get("resources", [])}

    async def get(self, resource: Resource, name: str) -> dict[str, Any] | None:
        """The object, or None when it does not exist (deleted, or never created)."""
        api = await self._api()
        return await self._request(f"reading {resource.kind} {name}", lambda: api.get_namespaced_custom_object(
            resource.group, resource.version, self.namespace, resource.plural, name,
            _request_timeout=REQUEST_TIMEOUT), gone=None)

    async def merge_patch(self, resource: Resource, name: str, patch: dict[str, Any]) -> bool:
        """Merge-patch; False if the object is gone. (kubernetes_asyncio sends a dict as a
        JSON patch unless told: always say merge-patch.)"""
        api = await self._api()

        async def call() -> bool:
            await api.patch_namespaced_custom_object(
                resource.group, resource.version, self.namespace, resource.plural, name, patch,
                _content_type="application/merge-patch+json", _request_timeout=REQUEST_TIMEOUT)
            return True

        return await self._request(f"patching {resource.kind} {name}", call, gone=False)

    async def delete(self, resource: Resource, name: str) -> bool:
        """Delete with propagationPolicy Background (the pods go after the job); False if gone."""
        api = await self._api()

        async def call() -> bool:
            await api.delete_namespaced_custom_object(
                resource.group, resource.version, self.namespace, resource.plural, name,
                propagation_policy="Background", _request_timeout=REQUEST_TIMEOUT)
            return True

        return await self._request(f"deleting {resource.kind} {name}", call, gone=False)

    async def delete_collection(self, resource: Resource, label_selector: str) -> None:
        api = await self._api()
        await self._request(f"deleting {resource.plural}", lambda: api.delete_collection_namespaced_custom_object(
            resource.group, resource.version, self.namespace, resource.plural, label_selector=label_selector,
            propagation_policy="Background", _request_timeout=REQUEST_TIMEOUT), gone=None)

    # -- core objects: ConfigMaps, secrets, claims, pods, logs -----------------------------

    #: Core kinds a trial creates besides its job -> (create method, delete-collection method).
    CORE_KINDS: dict[str, tuple[str, str]] = {
        "ConfigMap": ("create_namespaced_config_map", "delete_collection_namespaced_config_map"),
        "Secret": ("create_namespaced_secret", "delete_collection_namespaced_secret"),
        "PersistentVolumeClaim": ("create_namespaced_persistent_volume_claim",
                                  "delete_collection_namespaced_persistent_volume_claim"),
    }

    async def create_core(self, body: dict[str, Any]) -> None:
        """Create a ConfigMap, Secret or PVC of a trial; one that exists (a retried submit,
        another trial's shared secret) is kept as it is."""
        from kubernetes_asyncio.client.exceptions import ApiException

        core = await self._core()
        kind, name = body["kind"], body["metadata"]["name"]
        POOL.requests += 1
        try:
            await getattr(core, self.CORE_KINDS[kind][0])(self.namespace, body, _request_timeout=REQUEST_TIMEOUT)
        except ApiException as exc:
            if exc.status == 409:
                return
            what = f"creating {kind} {name}"  # never the body: it may be a secret
            if kind == "ConfigMap" and exc.status in (413, 422) and "long" in (exc.body or "").lower():
                raise KubernetesError(f"{what}: the packed code is over the API server's ConfigMap limit; "
                                      "use storage (nfs, azureStorage or pvc) or a smaller code directory "
                                      "(.nniignore)") from None
            raise KubernetesError(describe_api_error(exc, self.cluster, what)) from None
        except _transport_errors() as exc:
            raise KubernetesError(describe_api_error(exc, self.cluster, f"creating {kind} {name}")) from None

    async def read_config_map(self, name: str) -> dict[str, str] | None:
        """A ConfigMap's data, or None when there is none by that name."""
        core = await self._core()
        found = await self._request(f"reading ConfigMap {name}", lambda: core.read_namespaced_config_map(
            name, self.namespace, _request_timeout=REQUEST_TIMEOUT), gone=None)
        return None if found is None else dict(found.data or {})

    async def delete_core(self, kind: str, label_selector: str) -> None:
        core = await self._core()
        delete = getattr(core, self.CORE_KINDS[kind][1])
        await self._request(f"deleting {kind}s", lambda: delete(self.namespace, label_selector=label_selector,
                                                                 _request_timeout=REQUEST_TIMEOUT), gone=None)

    async def pods(self, label_selector: str) -> list[dict[str, Any]]:
        core = await self._core()
        result = await self._request("listing pods", lambda: core.list_namespaced_pod(
            self.namespace, label_selector=label_selector, _request_timeout=REQUEST_TIMEOUT))
        client = await POOL.get(self.cluster)
        return [client.sanitize_for_serialization(p) for p in result.items]

    async def pod_log(self, pod: str, container: str, since: str | None) -> str:
        """The pod's log with timestamps, from ``since`` (RFC 3339) on. The generated client has
        no sinceTime, so the call is made directly (the API server proxies it to the kubelet)."""
        from kubernetes_asyncio.client.exceptions import ApiException

        client = await POOL.get(self.cluster)
        query: list[tuple[str, str]] = [("container", container), ("timestamps", "true")]
        if since:
            query.append(("sinceTime", since))
        POOL.requests += 1
        try:
            response = await client.call_api(
                f"/api/v1/namespaces/{self.namespace}/pods/{pod}/log", "GET", query_params=query,
                header_params={"Accept": "*/*"}, auth_settings=["BearerToken"],
                _preload_content=False, _request_timeout=REQUEST_TIMEOUT)
        except ApiException as exc:
            if exc.status in (400, 404):  # container not started yet, or the pod is gone
                return ""
            raise KubernetesError(describe_api_error(exc, self.cluster, f"reading the log of pod {pod}")) from None
        except _transport_errors() as exc:
            raise KubernetesError(describe_api_error(exc, self.cluster, f"reading the log of pod {pod}")) from None
        raw = response[0] if isinstance(response, tuple) else response
        data = (await raw.read()).decode("utf-8", "replace")
        raw.release()
        if raw.status in (400, 404):
            return ""
        if raw.status >= 300:
            raise KubernetesError(f"reading the log of pod {pod}: {raw.status} {data[:300]}")
        return data


# -- incremental pod logs ------------------------------------------------------------------


def _parse_ts(text: str) -> tuple[datetime, int]:
    """An RFC 3339 timestamp with up to nanoseconds -> (seconds, nanoseconds) for ordering."""
    main, _, frac = text.rstrip("Z").partition(".")
    nanos = int((frac + "000000000")[:9]) if frac else 0
    return datetime.strptime(main, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=timezone.utc), nanos


def new_log_lines(text: str, last_ts: str | None, seen_at_last: int) -> tuple[list[str], str | None, int]:
    """Lines of a ``timestamps=true`` log read with ``sinceTime`` that the cursor has not seen.

    sinceTime has second precision, so a read repeats the lines of the last second: lines
    older than ``last_ts`` are dropped, and of those stamped exactly ``last_ts`` the first
    ``seen_at_last`` are. A last line without its newline is left for the next read.
    Returns (lines without timestamps, new last_ts, lines seen at it).
    """
    lines: list[str] = []
    last = _parse_ts(last_ts) if last_ts else None
    at_last = 0
    complete = text if text.endswith("\n") else text[:text.rfind("\n") + 1]
    for raw in complete.splitlines():
        ts, _, line = raw.partition(" ")
        try:
            key = _parse_ts(ts)
        except ValueError:
            continue  # not a timestamped line (a proxy error text); nothing to learn from it
        if last is not None and key < last:
            continue
        if last is not None and key == last:
            at_last += 1
            if at_last <= seen_at_last:
                continue
            seen_at_last = at_last
            lines.append(line)
            continue
        last, last_ts, at_last, seen_at_last = key, ts, 1, 1
        lines.append(line)
    return lines, last_ts, seen_at_last


def since_time(last_ts: str | None) -> str | None:
    """sinceTime for the next read: the last line's second (the API takes whole seconds)."""
    if not last_ts:
        return None
    return last_ts.split(".")[0].rstrip("Z") + "Z"


# -- one watch per kind --------------------------------------------------------------------


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
    _task: "asyncio.Task[None] | None" = None

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
        except asyncio.TimeoutError:
            pass

    async def _list(self) -> None:
        api = await self.objects_api._api()
        POOL.requests += 1
        listing = await api.list_namespaced_custom_object(
            self.resource.group, self.resource.version, self.objects_api.namespace, self.resource.plural,
            label_selector=self.label_selector, _request_timeout=REQUEST_TIMEOUT)
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
        """One watch request, until the server ends it; raises _Gone on 410."""
        client = await POOL.get(self.objects_api.cluster)
        path = (f"/apis/{self.resource.group}/{self.resource.version}/namespaces/{self.objects_api.namespace}/"
                f"{self.resource.plural}")
        query = [("watch", "true"), ("labelSelector", self.label_selector), ("allowWatchBookmarks", "true"),
                 ("resourceVersion", self.resource_version or ""), ("timeoutSeconds", str(WATCH_TIMEOUT_SECONDS))]
        POOL.requests += 1
        response = await client.call_api(path, "GET", query_params=query, header_params={"Accept": "application/json"},
                                         auth_settings=["BearerToken"], _preload_content=False,
                                         _request_timeout=WATCH_TIMEOUT_SECONDS + 30)
        raw = response[0] if isinstance(response, tuple) else response
        try:
            if raw.status == 410:
                raise _Gone()
            if raw.status >= 300:
                raise KubernetesError(f"watch {path}: {raw.status} {(await raw.read())[:300]!r}")
            async for line in raw.content:
                if not line.strip():
                    continue
                event = json.loads(line)
                self._apply(event)
        finally:
            raw.release()

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
            except _Gone:
                self.gone += 1
                need_list = True
            except asyncio.CancelledError:
                raise
            except ApiException as exc:
                if exc.status == 410:
                    self.gone += 1
                    need_list = True
                    continue
                self.error = describe_api_error(exc, self.objects_api.cluster, f"watching {self.resource.plural}")
                failures += 1
                need_list = True
                await asyncio.sleep(RELIST_DELAYS[min(failures, len(RELIST_DELAYS)) - 1] * (1 + random.random() / 4))
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
        self._by_loop: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple, Informer]]" = \
            weakref.WeakKeyDictionary()

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


def read_local_bytes(path: Path, offset: int, limit: int = 4 * 1024 * 1024) -> bytes:
    """Bytes of a file on mounted storage from ``offset``; empty if it is not there yet."""
    try:
        with open(path, "rb") as handle:
            handle.seek(offset)
            return handle.read(limit)
    except FileNotFoundError:
        return b""

"""Talking to a Kubernetes API server: where it is, clients per event loop, and the calls.

kubernetes_asyncio throughout (the triggerer is async; the synchronous calls
run on the process's background loop), with one long-lived ApiClient per
cluster per event loop so 200 followed trials share one connection pool.
Every call goes through one request path (:meth:`CustomObjects._request`):
counted, and its errors turned into a KubernetesError that names the object
and never the body (it may be a secret).
"""

from __future__ import annotations

import asyncio
import atexit
import json
import logging
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trialflow.platforms.base import PlatformUnreachable

if TYPE_CHECKING:
    from kubernetes_asyncio.client import ApiClient

log = logging.getLogger(__name__)

REQUEST_TIMEOUT = 30


class KubernetesError(RuntimeError):
    """A Kubernetes call failed; the message names the cluster, the object and what to do."""


class KubernetesUnreachable(KubernetesError, PlatformUnreachable):
    """The API server could not be reached, dropped the connection, or said it cannot serve
    yet (a restarting kube-apiserver answers 503 "server is starting"): it may come back."""


#: Answers of an API server that is starting, overloaded or behind a proxy that lost it: the
#: call may succeed later, so the follower keeps trying (measured: 503 "server is starting"
#: for ~1 s after a kube-apiserver restart, before its storage is ready).
COME_BACK_LATER = frozenset({429, 502, 503, 504})


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


#: kubernetesConnId -> a loaded kubernetes_asyncio Configuration (Connections.kubernetes: the
#: cncf-kubernetes provider's hook, given by the Airflow layer; this module imports no Airflow).
Configure = Callable[[str], Awaitable[Any]]


@dataclass(frozen=True)
class Cluster:
    """Where the API server is: an Airflow connection, a kubeconfig file, or the defaults.
    ``configure`` opens a connection id (it is not part of the cluster's identity)."""

    conn_id: str | None = None
    kubeconfig: str | None = None
    configure: Configure | None = field(default=None, compare=False, hash=False, repr=False)

    @property
    def label(self) -> str:
        if self.conn_id:
            return f"Kubernetes connection {self.conn_id!r}"
        return f"kubeconfig {self.kubeconfig}" if self.kubeconfig else "the default kubeconfig"


async def _configuration(cluster: Cluster) -> Any:
    """The client configuration: a connection through the provider's hook, else a kubeconfig
    file, else kubernetes_asyncio's defaults (KUBECONFIG, ~/.kube/config, in-cluster)."""
    from kubernetes_asyncio import config
    from kubernetes_asyncio.client import Configuration

    try:
        if cluster.conn_id:
            if cluster.configure is None:
                raise KubernetesError(
                    f"kubernetesConnId {cluster.conn_id!r} needs Airflow's cncf-kubernetes "
                    "provider (pip install 'airflow-provider-trialflow[kubernetes]')"
                )
            return await cluster.configure(cluster.conn_id)
        conf = Configuration()
        if cluster.kubeconfig:
            await config.load_kube_config(config_file=cluster.kubeconfig, client_configuration=conf)
        else:
            try:
                await config.load_kube_config(client_configuration=conf)
            except config.ConfigException:
                config.load_incluster_config(client_configuration=conf)
        return conf
    except KubernetesError:
        raise
    except Exception as exc:  # ConfigException, FileNotFoundError, yaml errors, the hook's own ...
        # First line only: YAML errors quote the offending text, which may hold a token.
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise KubernetesError(f"cannot load {cluster.label}: {first}") from None


class ClientPool:
    """One ApiClient per (event loop, cluster): loops die (each task run has its own), and a
    client bound to a dead loop must never be reused."""

    def __init__(self) -> None:
        self._by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[Cluster, ApiClient]] = (
            weakref.WeakKeyDictionary()
        )
        self.requests = 0  # counted for the benchmark and tests
        self._atexit = False

    async def get(self, cluster: Cluster) -> ApiClient:
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


def object_missing(exc: Any) -> bool:
    """A 404 about the object itself: kube-apiserver's Status names it (``details.name``). A 404
    for the route is not: a kind the server does not serve answers the plain text "404 page
    not found" (measured, a removed CRD; so does a restarting server before it has loaded its
    CRDs), or a Status without a name."""
    try:
        body = json.loads(exc.body or "")
    except (TypeError, ValueError):
        return False
    if not isinstance(body, dict) or body.get("kind") != "Status":
        return False
    return bool((body.get("details") or {}).get("name"))


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


def _transport_errors() -> tuple[type[Exception], ...]:
    """What a call raises when the API server cannot be reached or drops the connection (aiohttp's
    own errors are not all OSErrors)."""
    import aiohttp

    return OSError, asyncio.TimeoutError, aiohttp.ClientError


class CustomObjects:
    """The calls the platforms make, with the content types real API servers need."""

    def __init__(self, cluster: Cluster, namespace: str):
        self.cluster = cluster
        self.namespace = namespace

    async def custom_api(self) -> Any:
        from kubernetes_asyncio.client import CustomObjectsApi

        return CustomObjectsApi(await POOL.get(self.cluster))

    async def _core(self) -> Any:
        from kubernetes_asyncio.client import CoreV1Api

        return CoreV1Api(await POOL.get(self.cluster))

    async def _request(
        self,
        what: str,
        call: Callable[[], Awaitable[Any]],
        gone: Any = _RAISE,
        exists: Any = _RAISE,
        explain: dict[int, str] | None = None,
        named: bool = False,
    ) -> Any:
        """The one path every call takes: counted, its errors as KubernetesError naming
        ``what``; a 404 returns ``gone`` and a 409 ``exists`` when given (deleted objects are
        expected after a cancel or cleanup, existing ones on a retried submit); ``explain``
        replaces the message of a status with what to do about it. ``named``: the call is about
        one object, so a 404 is ``gone`` only when the API server's answer names that object
        (object_missing); a 404 for the route means the kind is not served right now."""
        from kubernetes_asyncio.client.exceptions import ApiException

        POOL.requests += 1
        try:
            return await call()
        except ApiException as exc:
            if exc.status == 404 and gone is not _RAISE:
                if not named or object_missing(exc):
                    return gone
                # 404 for the route, not the object: a restarting kube-apiserver serves custom
                # resources only once it has loaded their CRDs (measured: a PyTorchJob read as
                # "deleted outside trialflow" one second after a restart). Ask again later.
                raise KubernetesUnreachable(
                    f"{what}: the API server of {self.cluster.label} does not serve this kind right now "
                    "(starting, or its CRD was removed)"
                ) from None
            if exc.status == 409 and exists is not _RAISE:
                return exists
            if explain and explain.get(exc.status):
                raise KubernetesError(f"{what}: {explain[exc.status]}") from None
            if exc.status in COME_BACK_LATER:
                raise KubernetesUnreachable(describe_api_error(exc, self.cluster, what)) from None
            raise KubernetesError(describe_api_error(exc, self.cluster, what)) from None
        except _transport_errors() as exc:
            raise KubernetesUnreachable(describe_api_error(exc, self.cluster, what)) from None

    async def create(self, resource: Resource, body: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        """Create ``body``; if it exists already, return the existing object (re-attach).
        Returns (object, created)."""
        api = await self.custom_api()
        name = body["metadata"]["name"]
        created = await self._request(
            f"creating {resource.kind} {name}",
            lambda: api.create_namespaced_custom_object(
                resource.group,
                resource.version,
                self.namespace,
                resource.plural,
                body,
                _request_timeout=REQUEST_TIMEOUT,
            ),
            exists=None,
            explain={
                404: f"the API server of {self.cluster.label} does not serve {resource.api_version} "
                f"{resource.plural} in namespace {self.namespace} — is the {resource.kind} operator "
                f"(its CRD {resource.crd_name}) installed, and does the namespace exist?"
            },
        )
        if created is None:
            return await self.get(resource, name) or {}, False
        return created, True

    async def served_plurals(self, resource: Resource) -> set[str] | None:
        """The resources the API server serves in ``resource``'s group version (its discovery
        document), or None when it serves none: the CRD is not installed."""
        client = await POOL.get(self.cluster)
        found = await self._request(
            f"checking that {resource.api_version} is served",
            lambda: client.call_api(
                f"/apis/{resource.api_version}",
                "GET",
                auth_settings=["BearerToken"],
                response_types_map={200: "object"},
                _return_http_data_only=True,
                _request_timeout=REQUEST_TIMEOUT,
            ),
            gone=None,
        )
        return None if found is None else {r.get("name") for r in found.get("resources", [])}

    async def get(self, resource: Resource, name: str, *, served: bool = True) -> dict[str, Any] | None:
        """The object, or None when it does not exist (deleted, or never created). ``served``:
        the kind is known to be served (following a job), so a 404 for the route is "not now"
        (KubernetesUnreachable), not "deleted"; False before a first create, whose own 404
        says what to install."""
        api = await self.custom_api()
        return await self._request(
            f"reading {resource.kind} {name}",
            lambda: api.get_namespaced_custom_object(
                resource.group,
                resource.version,
                self.namespace,
                resource.plural,
                name,
                _request_timeout=REQUEST_TIMEOUT,
            ),
            gone=None,
            named=served,
        )

    async def merge_patch(self, resource: Resource, name: str, patch: dict[str, Any]) -> bool:
        """Merge-patch; False if the object is gone. (kubernetes_asyncio sends a dict as a
        JSON patch unless told: always say merge-patch.)"""
        api = await self.custom_api()

        async def call() -> bool:
            await api.patch_namespaced_custom_object(
                resource.group,
                resource.version,
                self.namespace,
                resource.plural,
                name,
                patch,
                _content_type="application/merge-patch+json",
                _request_timeout=REQUEST_TIMEOUT,
            )
            return True

        return await self._request(f"patching {resource.kind} {name}", call, gone=False, named=True)

    async def delete(self, resource: Resource, name: str) -> bool:
        """Delete with propagationPolicy Background (the pods go after the job); False if gone."""
        api = await self.custom_api()

        async def call() -> bool:
            await api.delete_namespaced_custom_object(
                resource.group,
                resource.version,
                self.namespace,
                resource.plural,
                name,
                propagation_policy="Background",
                _request_timeout=REQUEST_TIMEOUT,
            )
            return True

        return await self._request(f"deleting {resource.kind} {name}", call, gone=False, named=True)

    async def delete_collection(self, resource: Resource, label_selector: str) -> None:
        api = await self.custom_api()
        await self._request(
            f"deleting {resource.plural}",
            lambda: api.delete_collection_namespaced_custom_object(
                resource.group,
                resource.version,
                self.namespace,
                resource.plural,
                label_selector=label_selector,
                propagation_policy="Background",
                _request_timeout=REQUEST_TIMEOUT,
            ),
            gone=None,
        )

    # -- core objects: ConfigMaps, secrets, claims, pods, logs -----------------------------

    #: Core kinds a trial creates besides its job -> (create method, delete-collection method).
    CORE_KINDS: dict[str, tuple[str, str]] = {
        "ConfigMap": ("create_namespaced_config_map", "delete_collection_namespaced_config_map"),
        "Secret": ("create_namespaced_secret", "delete_collection_namespaced_secret"),
        "PersistentVolumeClaim": (
            "create_namespaced_persistent_volume_claim",
            "delete_collection_namespaced_persistent_volume_claim",
        ),
    }

    async def create_core(self, body: dict[str, Any]) -> None:
        """Create a ConfigMap, Secret or PVC of a trial; one that exists (a retried submit,
        another trial's shared secret) is kept as it is."""
        core = await self._core()
        kind, name = body["kind"], body["metadata"]["name"]
        too_big = (
            (
                "the packed code is over the API server's ConfigMap limit; use storage (nfs, azureStorage or "
                "pvc) or a smaller code directory (.nniignore)"
            )
            if kind == "ConfigMap"
            else ""
        )
        await self._request(
            f"creating {kind} {name}",  # never the body: it may be a secret
            lambda: getattr(core, self.CORE_KINDS[kind][0])(self.namespace, body, _request_timeout=REQUEST_TIMEOUT),
            exists=None,
            explain={413: too_big, 422: too_big},
        )

    async def read_config_map(self, name: str) -> dict[str, str] | None:
        """A ConfigMap's data, or None when there is none by that name."""
        core = await self._core()
        found = await self._request(
            f"reading ConfigMap {name}",
            lambda: core.read_namespaced_config_map(name, self.namespace, _request_timeout=REQUEST_TIMEOUT),
            gone=None,
        )
        return None if found is None else dict(found.data or {})

    async def delete_core(self, kind: str, label_selector: str) -> None:
        core = await self._core()
        delete = getattr(core, self.CORE_KINDS[kind][1])
        await self._request(
            f"deleting {kind}s",
            lambda: delete(self.namespace, label_selector=label_selector, _request_timeout=REQUEST_TIMEOUT),
            gone=None,
        )

    async def pods(self, label_selector: str) -> list[dict[str, Any]]:
        core = await self._core()
        result = await self._request(
            "listing pods",
            lambda: core.list_namespaced_pod(
                self.namespace, label_selector=label_selector, _request_timeout=REQUEST_TIMEOUT
            ),
        )
        client = await POOL.get(self.cluster)
        return [client.sanitize_for_serialization(p) for p in result.items]

    async def pod_log(self, pod: str, container: str, since: str | None) -> str:
        """The pod's log with timestamps, from ``since`` (RFC 3339) on. The generated client has
        no sinceTime, so the call is made directly (the API server proxies it to the kubelet).
        Empty while the container has not started (400) or when the pod is gone (404)."""
        from kubernetes_asyncio.client.exceptions import ApiException

        client = await POOL.get(self.cluster)
        query: list[tuple[str, str]] = [("container", container), ("timestamps", "true")]
        if since:
            query.append(("sinceTime", since))

        async def call() -> str:
            try:
                response = await client.call_api(
                    f"/api/v1/namespaces/{self.namespace}/pods/{pod}/log",
                    "GET",
                    query_params=query,
                    header_params={"Accept": "*/*"},
                    auth_settings=["BearerToken"],
                    _preload_content=False,
                    _request_timeout=REQUEST_TIMEOUT,
                )
            except ApiException as exc:
                if exc.status == 400:
                    return ""
                raise
            raw = response[0] if isinstance(response, tuple) else response
            data = (await raw.read()).decode("utf-8", "replace")
            raw.release()
            if raw.status in (400, 404):
                return ""
            if raw.status >= 300:
                raise KubernetesError(f"reading the log of pod {pod}: {raw.status} {data[:300]}")
            return data

        return await self._request(f"reading the log of pod {pod}", call, gone="")

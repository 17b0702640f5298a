"""Clusters given as Airflow Kubernetes connections (``kubernetesConnId``): loaded by the
cncf-kubernetes provider's AsyncKubernetesHook, so the connection's fields (kube_config_path,
kube_config, in_cluster, cluster_context, disable_verify_ssl) mean exactly what they mean for
KubernetesPodOperator, and the triggerer looks them up the async way."""

from __future__ import annotations

from typing import Any

from trialflow.platforms.kubernetes.client import KubernetesError


async def configuration(conn_id: str) -> Any:
    """The kubernetes_asyncio Configuration the provider's hook loads for ``conn_id`` (its
    public get_conn(): the configuration outlives the client it briefly opens)."""
    try:
        from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook
    except ImportError as exc:  # pragma: no cover - the kubernetes extra is missing
        raise KubernetesError(
            "kubernetesConnId needs the cncf-kubernetes provider: pip install 'airflow-provider-trialflow[kubernetes]'"
        ) from exc
    hook = AsyncKubernetesHook(conn_id=conn_id)
    async with hook.get_conn() as client:
        conf = client.configuration
    extras = await hook.get_conn_extras()
    verify = extras.get("disable_verify_ssl", extras.get("extra__kubernetes__disable_verify_ssl"))
    if str(verify).lower() in ("true", "1"):
        conf.verify_ssl = False
    return conf

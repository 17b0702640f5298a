"""Clusters given as Airflow Kubernetes connections (``kubernetesConnId``): the cncf-kubernetes
provider's connection fields (kube_config_path, kube_config, in_cluster, cluster_context,
disable_verify_ssl) mean what they mean for KubernetesPodOperator, read through its
AsyncKubernetesHook so the triggerer looks them up the async way."""

from __future__ import annotations

from typing import Any

from trialflow.platforms import kube_client


async def connection_extras(conn_id: str) -> dict[str, Any]:
    try:
        from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook
    except ImportError as exc:  # pragma: no cover - the kubernetes extra is missing
        raise kube_client.KubernetesError(
            "kubernetesConnId needs the cncf-kubernetes provider: pip install 'airflow-provider-trialflow[kubernetes]'"
        ) from exc
    extras = await AsyncKubernetesHook(conn_id=conn_id).get_conn_extras()
    # The provider still reads the old "extra__kubernetes__" spelling of each field: so do we.
    return {field: extras.get(field, extras.get(f"extra__kubernetes__{field}"))
            for field in ("in_cluster", "kube_config_path", "kube_config", "cluster_context", "disable_verify_ssl")}


def register() -> None:
    """Let the Kubernetes platforms open kubernetesConnId clusters (called by operator and trigger)."""
    kube_client.set_conn_extras_reader(connection_extras)

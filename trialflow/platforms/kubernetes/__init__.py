"""The Kubernetes family: one base platform and one small module per kind.

``platform`` (the shared submit/poll/cancel/cleanup), ``manifests`` (pure builders),
``client`` (where the cluster is, one request path), ``informer`` (one watch per kind),
``logs`` (incremental metrics), ``storage`` (ConfigMap or mounted storage); the kinds:
``kubeflow`` (TFJob, PyTorchJob), ``trainer`` (Trainer v2 TrainJob), ``frameworkcontroller``,
``adaptdl``.
"""

from __future__ import annotations

from trialflow.platforms.kubernetes.client import KubernetesError, Resource
from trialflow.platforms.kubernetes.platform import KubernetesPlatform

__all__ = ["KubernetesError", "KubernetesPlatform", "Resource"]

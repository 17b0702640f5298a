"""A real kube-apiserver + etcd and the test controller, once per test session."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Iterator

import pytest

from tests.kube.cluster import KubeCluster, missing_reason
from tests.kube.controller import TestController


def _skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "the test controller runs pods in private mount namespaces (unshare --mount): needs root"
    return missing_reason()


@pytest.fixture(scope="session")
def kube_cluster(tmp_path_factory) -> Iterator[KubeCluster]:
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    cluster = KubeCluster(tmp_path_factory.mktemp("kube"))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def kube_controller(kube_cluster: KubeCluster, tmp_path_factory) -> Iterator[TestController]:
    controller = TestController(kube_cluster.kubeconfig, tmp_path_factory.mktemp("kube-controller"),
                                path_prefix=str(Path(sys.executable).parent)).start()
    try:
        yield controller
    finally:
        controller.stop()
    assert controller.running_processes() == 0

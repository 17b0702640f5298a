"""The multi-host deployment (tests/cluster/deployment.py), started once for these tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.cluster.deployment import Deployment, missing_reason

pytestmark = pytest.mark.integration

#: Two hosts: worker-a serves the queue its local trials are pinned to, both serve the default.
HOSTS = {"worker-a": ("box-a", "default"), "worker-b": ("default",)}


@pytest.fixture(scope="session")
def cluster(tmp_path_factory, postgres_url) -> Iterator[Deployment]:
    reason = missing_reason()
    if reason:
        pytest.skip(reason)
    deployment = Deployment(tmp_path_factory.mktemp("cluster"), postgres_url)
    try:
        deployment.start(HOSTS)
        deployment.wait_for_workers()
        yield deployment
    finally:
        deployment.stop()

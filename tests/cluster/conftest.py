"""The multi-host deployment (tests/cluster/deployment.py), started once for these tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.deployment import SSH_MACHINE, Deployment, missing_reason

pytestmark = pytest.mark.integration

#: Two hosts: worker-a serves the queue its local trials are pinned to, both serve the default.
HOSTS = {"worker-a": ("box-a", "default"), "worker-b": ("default",)}


# Package scope: stopped once these tests are done, not left running under the rest of the suite.
@pytest.fixture(scope="package")
def cluster(tmp_path_factory, postgres_server) -> Iterator[Deployment]:
    reason = missing_reason()
    if reason:
        pytest.skip(reason)
    deployment = Deployment(tmp_path_factory.mktemp("cluster"), postgres_server.url)
    try:
        deployment.start(HOSTS)
        deployment.wait_for_workers()
        yield deployment
    finally:
        deployment.stop()


@pytest.fixture(scope="package")
def ssh_machine(cluster: Deployment) -> Iterator:
    """The remote platform's machine: a real OpenSSH server on a host of its own (its own
    hostname, processes and disk: tests/helpers/sshd.py Machine), as the workers are."""
    from tests.helpers import sshd

    if not Path(sshd.SSHD).exists():
        pytest.skip("OpenSSH server not found (Debian package openssh-server; .ci/run installs it)")
    server = sshd.on_machine_of_its_own(sshd.make_server("m"), SSH_MACHINE)
    try:
        server.start()
        yield server
    finally:
        sshd.remove(server)

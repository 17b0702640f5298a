"""An object store over HTTP for the checkpoint and artifact tests: Azurite's blob service on
127.0.0.1 (Microsoft's emulator, the one CI installs for Azure ML), reached the way a user's
Airflow reaches Azure Blob Storage: ``abfs://<container>/...`` through ObjectStoragePath, the
Microsoft Azure provider's filesystem (adlfs) and an Airflow connection holding the account's
connection string. Nothing of it is stubbed: every byte crosses HTTP to Azurite."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.helpers.emulators.azure import ACCOUNT, ACCOUNT_KEY, azurite, missing_reason

CONN_ID = "trialflow_artifacts"


@dataclass(frozen=True)
class ObjectStore:
    """A running store: its container's URL and the Airflow connection that reaches it."""

    url: str
    conn_id: str
    connection_string: str

    def root(self, prefix: str):  # -> ObjectStoragePath
        from airflow.sdk import ObjectStoragePath

        return ObjectStoragePath(f"{self.url}/{prefix}", conn_id=self.conn_id)


def _create_container(connection_string: str, name: str) -> None:
    from azure.storage.blob import BlobServiceClient

    BlobServiceClient.from_connection_string(connection_string).create_container(name)


@pytest.fixture(scope="session")
def object_store(tmp_path_factory) -> Iterator[ObjectStore]:
    """Azurite over plain HTTP, a container ``checkpoints`` in it, and ``AIRFLOW_CONN_...`` set
    for this process and every process it starts (a task, a trial's follower)."""
    reason = missing_reason()
    if reason and "openssl" not in reason:  # plain HTTP needs no certificate
        pytest.skip(reason)
    with azurite(tmp_path_factory.mktemp("azurite")) as port:
        connection_string = (
            f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={ACCOUNT_KEY};"
            f"BlobEndpoint=http://127.0.0.1:{port}/{ACCOUNT};"
        )
        _create_container(connection_string, "checkpoints")
        variable = f"AIRFLOW_CONN_{CONN_ID.upper()}"
        before = os.environ.get(variable)
        os.environ[variable] = json.dumps({"conn_type": "wasb", "extra": {"connection_string": connection_string}})
        try:
            yield ObjectStore("abfs://checkpoints", CONN_ID, connection_string)
        finally:
            if before is None:
                os.environ.pop(variable, None)
            else:
                os.environ[variable] = before


def blob_names(store: ObjectStore, prefix: str) -> list[str]:
    """What Azurite holds under ``prefix``, asked of Azurite itself (not through the path)."""
    from azure.storage.blob import ContainerClient

    client = ContainerClient.from_connection_string(store.connection_string, "checkpoints")
    return sorted(b.name for b in client.list_blobs(name_starts_with=prefix))

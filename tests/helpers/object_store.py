"""Object stores over HTTP for the checkpoint and artifact tests, reached the way a user's
Airflow reaches them, through ObjectStoragePath, the store's Airflow provider and an Airflow
connection; nothing of them is stubbed: every byte crosses HTTP to the server.

* Azurite's blob service on 127.0.0.1 (Microsoft's emulator, the one CI installs for Azure ML):
  ``abfs://<container>/...``, the Microsoft Azure provider's filesystem (adlfs) and a
  connection holding the account's connection string (``object_store``);
* an S3-compatible server on 127.0.0.1 (moto's server mode, the S3 API most teams' stores
  speak): ``s3://<bucket>/...``, the Amazon provider's filesystem (s3fs over aiobotocore) and an
  ``aws`` connection naming its endpoint (``s3_store``);
* ``any_object_store``: a test run on each of the two."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.helpers.emulators.azure import ACCOUNT, ACCOUNT_KEY, azurite, missing_reason

CONN_ID = "trialflow_artifacts"


@dataclass(frozen=True)
class ObjectStore:
    """A running store: its container's URL and the Airflow connection that reaches it;
    ``connection_string``: Azurite's account connection string, or the S3 server's endpoint."""

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
        with pytest.MonkeyPatch.context() as env:  # the variable as it was, after the session
            connection = {"conn_type": "wasb", "extra": {"connection_string": connection_string}}
            env.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", json.dumps(connection))
            yield ObjectStore("abfs://checkpoints", CONN_ID, connection_string)


S3_CONN_ID = "trialflow_s3"
_S3_KEY, _S3_SECRET = "trialflow-test-key", "trialflow-test-secret"


@pytest.fixture(scope="session")
def s3_store() -> Iterator[ObjectStore]:
    """moto's S3 server on 127.0.0.1 (a thread of this process, stopped at the session's end), a
    bucket ``checkpoints`` in it, and ``AIRFLOW_CONN_TRIALFLOW_S3`` (an ``aws`` connection with
    its endpoint and keys) set for this process and every process it starts."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        _s3_client(endpoint).create_bucket(Bucket="checkpoints")
        connection = {
            "conn_type": "aws",
            "login": _S3_KEY,
            "password": _S3_SECRET,
            "extra": {"endpoint_url": endpoint, "region_name": "us-east-1"},
        }
        with pytest.MonkeyPatch.context() as env:
            env.setenv(f"AIRFLOW_CONN_{S3_CONN_ID.upper()}", json.dumps(connection))
            yield ObjectStore("s3://checkpoints", S3_CONN_ID, endpoint)
    finally:
        server.stop()


def _s3_client(endpoint: str):
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=_S3_KEY,
        aws_secret_access_key=_S3_SECRET,
        region_name="us-east-1",
    )


@pytest.fixture(params=["azurite", "s3"])
def any_object_store(request) -> ObjectStore:
    """The test once on Azurite (abfs://) and once on the S3-compatible server (s3://)."""
    return request.getfixturevalue("object_store" if request.param == "azurite" else "s3_store")


def blob_names(store: ObjectStore, prefix: str) -> list[str]:
    """What the store holds under ``prefix``, asked of the server itself (not through the path)."""
    if store.url.startswith("s3://"):
        listed = _s3_client(store.connection_string).list_objects_v2(Bucket="checkpoints", Prefix=prefix)
        return sorted(item["Key"] for item in listed.get("Contents", []))
    from azure.storage.blob import ContainerClient

    client = ContainerClient.from_connection_string(store.connection_string, "checkpoints")
    return sorted(b.name for b in client.list_blobs(name_starts_with=prefix))

"""The stores the checkpoint and artifact tests run on: a plain folder, Airflow's
ObjectStoragePath over ``file://``, and an object store over HTTP (Azurite, through the Microsoft
Azure provider's ``abfs://``)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(params=["folder", "object_storage_path", "azurite"])
def root(request, tmp_path: Path):
    if request.param == "azurite":  # an object store over HTTP, through the Azure provider
        return request.getfixturevalue("object_store").root(tmp_path.name)
    store = tmp_path / "store"
    store.mkdir()
    if request.param == "folder":
        return store
    from airflow.sdk import ObjectStoragePath

    return ObjectStoragePath(f"file://{store}")

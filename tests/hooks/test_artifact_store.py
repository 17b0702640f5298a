"""The checkpoints' root as Airflow reaches it: the experiment's folder by default, a store URL
through ObjectStoragePath with its connection (kept and fetched back through it over ``file://``
and over HTTP to Azurite), and a scheme without its provider said with the package to install."""

from __future__ import annotations

from pathlib import Path

import pytest

from trialflow.checkpoints.keeper import TrialCheckpoints
from trialflow.config.checkpoints import CheckpointsConfig
from trialflow.hooks.artifact_store import DEFAULT_FOLDER, ArtifactStoreUnavailable, checkpoint_root


def _checkpoint(folder: Path, step: int, data: bytes) -> None:
    path = folder / "checkpoints" / f"{step:09d}" / "model.bin"
    path.parent.mkdir(parents=True)
    path.write_bytes(data)


def test_without_a_store_the_checkpoints_go_beside_the_experiments_folders(tmp_path):
    root = checkpoint_root(CheckpointsConfig(), tmp_path)
    assert root.protocol == "file" and Path(root.path) == tmp_path / DEFAULT_FOLDER
    trial = tmp_path / "trial"
    _checkpoint(trial, 1, b"w")
    TrialCheckpoints(root, "exp1", "exp1-0000").keep(trial, 1)
    assert (tmp_path / DEFAULT_FOLDER / "exp1" / "exp1-0000" / "checkpoints" / "000000001").is_dir()


def test_a_store_url_is_reached_through_object_storage_path_with_its_connection(tmp_path):
    from airflow.sdk import ObjectStoragePath

    store = tmp_path / "bucket"
    store.mkdir()
    config = CheckpointsConfig.model_validate({"store": f"file://{store}", "connId": "artifacts_conn"})
    root = checkpoint_root(config, tmp_path)
    assert isinstance(root, ObjectStoragePath) and root.conn_id == "artifacts_conn"
    trial = tmp_path / "trial"
    _checkpoint(trial, 3, b"weights")
    kept = TrialCheckpoints(root, "exp1", "exp1-0000")
    kept.keep(trial, 3)
    assert (store / "exp1" / "exp1-0000" / "checkpoints" / "000000003" / "model.bin").read_bytes() == b"weights"
    assert (kept.fetch(3, tmp_path / "back") / "model.bin").read_bytes() == b"weights"


def test_an_object_store_over_http_is_written_through_its_airflow_connection(tmp_path, any_object_store):
    """abfs:// (Azurite) and s3:// (an S3-compatible server), each through its provider."""
    from tests.helpers.object_store import blob_names

    object_store = any_object_store
    config = CheckpointsConfig.model_validate({"store": f"{object_store.url}/team-a", "connId": object_store.conn_id})
    root = checkpoint_root(config, tmp_path)
    assert root.protocol == object_store.url.split(":")[0]
    assert "AccountKey" not in str(root) and "trialflow-test-secret" not in str(root)
    trial = tmp_path / "trial"
    _checkpoint(trial, 2, b"weights")
    kept = TrialCheckpoints(root, "exp2", "exp2-0001")
    kept.keep(trial, 2)
    assert blob_names(object_store, "team-a/exp2/") == [  # asked of the server, not through the path
        "team-a/exp2/exp2-0001/checkpoints/000000002.manifest.json",
        "team-a/exp2/exp2-0001/checkpoints/000000002/model.bin",
    ]
    assert (kept.fetch(2, tmp_path / "back") / "model.bin").read_bytes() == b"weights"


@pytest.mark.parametrize(
    ("url", "package"),
    [("gs://bucket/p", "apache-airflow-providers-google")],  # abfs: the dev group has its provider
)
def test_a_scheme_without_its_provider_names_the_package_to_install(tmp_path, url, package):
    from airflow.sdk.io.fs import has_fs

    assert not has_fs(url.split(":")[0])  # the dev group has no Google provider
    config = CheckpointsConfig.model_validate({"store": url})
    with pytest.raises(ArtifactStoreUnavailable, match=f"checkpoints.store: .*install {package}"):
        checkpoint_root(config, tmp_path)


def test_a_store_whose_provider_is_there_but_whose_connection_is_missing_says_so(tmp_path):
    """abfs:// without a connection: the Azure provider is installed (the dev group has it), the
    account is not; the message names the connection to check, not a package to install."""
    config = CheckpointsConfig.model_validate({"store": "abfs://container/p"})
    with pytest.raises(ArtifactStoreUnavailable, match=r"cannot open abfs:// with connection None .*connId"):
        checkpoint_root(config, tmp_path)

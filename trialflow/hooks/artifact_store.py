"""Where an experiment's checkpoints live, as Airflow reaches it: the ``checkpoints.store`` URL
through Airflow's ``ObjectStoragePath`` with the connection ``connId`` names (so the store's
credentials stay in Airflow's connections or secrets backend), or a folder beside the experiments' own.

The path it gives is what trialflow.checkpoints.keeper writes through; Airflow's providers
bring the stores (``s3://`` with the Amazon provider, ``gs://`` with Google's, ``abfs://`` with
Microsoft Azure's: ``pip install airflow-provider-trialflow[abfs]``). A scheme whose provider
is not installed is said at once, with the package to install, instead of at a trial's first
checkpoint.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from trialflow.config.checkpoints import DEFAULT_FOLDER as DEFAULT_FOLDER

if TYPE_CHECKING:
    from trialflow.checkpoints.keeper import StoragePath
    from trialflow.config.checkpoints import CheckpointsConfig

#: The Airflow provider that registers each scheme's filesystem (what to install).
PROVIDERS = {
    "s3": "apache-airflow-providers-amazon",
    "gs": "apache-airflow-providers-google",
    "gcs": "apache-airflow-providers-google",
    "abfs": "apache-airflow-providers-microsoft-azure",
    "abfss": "apache-airflow-providers-microsoft-azure",
}


class ArtifactStoreUnavailable(RuntimeError):
    """The store's scheme has no filesystem here (its provider is not installed)."""


def checkpoint_root(checkpoints: CheckpointsConfig, workdir: str | Path) -> StoragePath:
    """The root every trial's checkpoints of this experiment go under: an ObjectStoragePath
    always (``file://`` for ``<workdir>/artifacts``, beside the experiments' folders), so every
    store is written one way; the keeper puts each experiment and trial under it."""
    return store_root(checkpoints.store_url(workdir), checkpoints.conn_id, checkpoints.scheme)


def store_root(url: str, conn_id: str | None, scheme: str = "") -> StoragePath:
    """The store at ``url`` through its connection (the experiment's checkpoints.store as the
    start step recorded it: what the pages and a downstream DAG read)."""
    from airflow.sdk import ObjectStoragePath

    root = ObjectStoragePath(url, conn_id=conn_id)
    if root.protocol == "file":
        return root
    scheme = scheme or root.protocol
    try:
        root.fs  # noqa: B018  (resolving the filesystem is the check)
    except (ValueError, ImportError) as exc:
        if isinstance(exc, ImportError) or "No filesystem registered" in str(exc):
            package = PROVIDERS.get(scheme, "the Airflow provider of that store")
            raise ArtifactStoreUnavailable(
                f"checkpoints.store: {scheme}:// has no filesystem here ({exc}): install {package} "
                "where Airflow's workers and triggerer run"
            ) from None
        # the provider is there; the store's account or credentials are not (its connection)
        raise ArtifactStoreUnavailable(
            f"checkpoints.store: cannot open {scheme}:// with connection {conn_id!r} ({exc}): "
            "check the Airflow connection named by checkpoints.connId"
        ) from None
    return root

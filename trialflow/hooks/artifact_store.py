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
#: The folder of the experiments' working directory that holds their checkpoints by default.
DEFAULT_FOLDER = "artifacts"


class ArtifactStoreUnavailable(RuntimeError):
    """The store's scheme has no filesystem here (its provider is not installed)."""


def checkpoint_root(checkpoints: CheckpointsConfig, workdir: str | Path) -> StoragePath:
    """The root every trial's checkpoints of this experiment go under: an ObjectStoragePath
    always (``file://`` for ``<workdir>/artifacts``, beside the experiments' folders), so every
    store is written one way; the keeper puts each experiment and trial under it."""
    from airflow.sdk import ObjectStoragePath

    if checkpoints.store is None:
        return ObjectStoragePath(f"file://{Path(workdir).resolve() / DEFAULT_FOLDER}")
    root = ObjectStoragePath(checkpoints.store, conn_id=checkpoints.conn_id)
    try:
        root.fs  # noqa: B018  (resolving the filesystem is the check)
    except (ValueError, ImportError) as exc:
        scheme = checkpoints.scheme
        package = PROVIDERS.get(scheme, "the Airflow provider of that store")
        raise ArtifactStoreUnavailable(
            f"checkpoints.store: {scheme}:// has no filesystem here ({exc}): install {package} "
            "where Airflow's workers and triggerer run"
        ) from None
    return root

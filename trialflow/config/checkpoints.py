"""trialflow's ``checkpoints`` key: where a trial's checkpoints go, how many it keeps, and how
often a trial that lost its machine starts again from its last one.

NNI kept a trial's output only in the trial's folder on whatever machine ran it, and its
PBTTuner needed every trial on one shared disk. Here the checkpoints leave the machine for an
object store that Airflow reaches (an ``ObjectStoragePath`` URL with its Airflow connection),
so a trial restarted elsewhere, a later trial of Population Based Training and a downstream DAG
all find them. The local default is the experiment's folder.

A credential never goes into the URL (``user:pass@``, a signed query): it lives in the Airflow
connection ``connId`` names, so no config, log or page holds it; such a URL is refused with
that said.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

from pydantic import Field, field_validator

from trialflow.config.base import Int, NniModel, SizeMB, Str

#: The stores an ObjectStoragePath URL may name here: the schemes Airflow's providers register a
#: filesystem for, with a connection (local files; S3 and S3-compatible servers with the Amazon
#: provider; Google Cloud Storage with Google's; Azure Blob / Data Lake with Microsoft Azure's,
#: which registers abfs and abfss, not az or wasb).
STORE_SCHEMES = ("file", "s3", "gs", "gcs", "abfs", "abfss")
#: The folder of the experiments' working directory that holds their checkpoints by default.
DEFAULT_FOLDER = "artifacts"
#: Longer than any bucket and prefix; checked before the URL is parsed.
MAX_STORE_URL = 1024
#: Query keys that carry a credential in a storage URL (Azure SAS, presigned S3, GCS signed).
_SIGNED_QUERY_KEYS = ("sig", "signature", "x-amz-signature", "x-amz-credential", "x-goog-signature", "sv", "token")


def default_folder(workdir: str | os.PathLike[str]) -> Path:
    """The default store: a folder beside the experiments' folders in ``workdir``."""
    return Path(workdir).resolve() / DEFAULT_FOLDER


#: The experiment attribute the start step records its ArtifactStore in.
ARTIFACT_STORE_ATTR = "artifacts"


@dataclass(frozen=True)
class ArtifactStore:
    """Where an experiment's checkpoints and artifacts are, as its start step records it in
    the experiment store (the attribute ``artifacts``): what the pages and a downstream DAG
    open, through the connection, without the config file."""

    url: str
    conn_id: str | None = None

    @classmethod
    def from_attr(cls, raw: object) -> ArtifactStore | None:
        """From the stored form; None where the experiment keeps none (or it is not one)."""
        if not isinstance(raw, dict) or not isinstance(raw.get("url"), str):
            return None
        conn_id = raw.get("conn_id")
        return cls(raw["url"], conn_id if isinstance(conn_id, str) else None)


class CheckpointsConfig(NniModel):
    """``checkpoints``: ``store`` (an ObjectStoragePath URL; default: the experiment's folder),
    ``connId`` (the Airflow connection with its credentials), ``keepLast`` and ``keepBest``
    (per trial: the newest N, and the best K by the result reported at their step; the rest are
    deleted as the trial goes), ``restarts`` (how many times a trial whose job ended by an
    infrastructure fault starts again from its last checkpoint) and ``restartOnFailure`` (also
    a trial that exited non-zero on its own: off, since the same code fails the same way)."""

    store: Str | None = None
    conn_id: Str | None = Field(default=None, min_length=1, max_length=250)
    keep_last: Int = Field(default=2, ge=1, le=1000)
    keep_best: Int = Field(default=1, ge=0, le=1000)
    restarts: Int = Field(default=3, ge=0, le=100)
    restart_on_failure: bool = False
    #: What one checkpoint may hold (4gb; a size such as 512mb, up to 1tb): one past it is not kept.
    max_checkpoint_size: SizeMB = Field(default=4096, le=1024 * 1024)
    #: What a trial's artifacts may hold together (4gb): the files past it are left out, said so.
    max_artifacts_size: SizeMB = Field(default=4096, le=1024 * 1024)

    @property
    def max_checkpoint_bytes(self) -> int:
        return self.max_checkpoint_size * 1024 * 1024

    @property
    def max_artifacts_bytes(self) -> int:
        return self.max_artifacts_size * 1024 * 1024

    @field_validator("store")
    @classmethod
    def _a_store_url_without_credentials(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if len(value) > MAX_STORE_URL:
            raise ValueError(f"expected a URL of at most {MAX_STORE_URL} characters, got {len(value)}")
        parts = urlsplit(value)
        if parts.scheme.lower() not in STORE_SCHEMES:
            shown = f"{parts.scheme}://" if parts.scheme else "no scheme"
            raise ValueError(
                f"expected a URL of one of {', '.join(STORE_SCHEMES)} (e.g. s3://bucket/prefix), got {shown}"
            )
        if parts.username is not None or parts.password is not None:
            raise ValueError(
                "the URL holds a user or password: credentials go in the Airflow connection named by connId"
            )
        signed = [k for k, _ in parse_qsl(parts.query, keep_blank_values=True) if k.lower() in _SIGNED_QUERY_KEYS]
        if signed:
            raise ValueError(
                f"the URL's query holds a signature or token ({', '.join(sorted(signed))}): credentials go in "
                "the Airflow connection named by connId"
            )
        if parts.scheme.lower() != "file" and not parts.netloc:
            raise ValueError(f"expected a bucket or container after {parts.scheme}://")
        return value

    def store_url(self, workdir: str | os.PathLike[str]) -> str:
        """The store's URL: ``store``, or the default folder beside the experiments' folders in
        ``workdir`` as a ``file://`` URL (one kind of address for every reader)."""
        return self.store or f"file://{default_folder(workdir)}"

    @property
    def scheme(self) -> str:
        """The store's protocol; ``default`` for the experiment's own folder."""
        return urlsplit(self.store).scheme.lower() if self.store else "default"

"""What the Azure ML tests start: a certificate authority the test process trusts, Azurite
(Microsoft's storage emulator, from npm, cached under ~/.cache/trialflow/azurite) over HTTPS,
the workspace emulator, and azure-identity's Azure CLI credential answered by a stand-in `az`.

Nothing here replaces a client: azure-ai-ml, azure-identity and azure-storage-blob run as they
would against Azure, pointed at 127.0.0.1 by the SDK's own means (ARM_CLOUD_METADATA_URL for
the cloud's endpoints, REQUESTS_CA_BUNDLE for trust, AZURE_TOKEN_CREDENTIALS for the chain).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.helpers.emulators.aml import AmlEmulator
from tests.helpers.hosts import NAMES, resolvable

AZURITE_HOME = Path.home() / ".cache" / "trialflow" / "azurite"
AZURITE = AZURITE_HOME / "node_modules" / ".bin" / "azurite-blob"
ACCOUNT = "devstoreaccount1"
#: Azurite's well-known development account key (public, in Microsoft's documentation).
ACCOUNT_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
FAKE_AZ = Path(__file__).resolve().parent.parent / "fakes" / "azure-cli"
WORKSPACE = {"subscription": "5f1b2c3d-0000-4000-8000-000000000001", "resource_group": "rg-trials", "workspace": "ws1"}


def missing_reason() -> str | None:
    """Why the Azure ML tests cannot run here (None: they can)."""
    if shutil.which("openssl") is None:
        return "openssl is not installed (it makes the test certificate authority)"
    if not AZURITE.exists() and shutil.which("npm") is None:
        return "npm is not installed (Azurite, Microsoft's storage emulator, comes from npm)"
    return resolvable()


def install_azurite() -> None:
    if AZURITE.exists():
        return
    AZURITE_HOME.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["npm", "install", "--no-audit", "--no-fund", "--silent", "--prefix", str(AZURITE_HOME), "azurite@3.35.0"],
        check=True,
        timeout=600,
    )


def make_certificate(folder: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and the blob account's name: it is its own CA."""
    cert, key = folder / "cert.pem", folder / "key.pem"
    names = ",".join(["IP:127.0.0.1", "DNS:localhost", *(f"DNS:{n}" for n in NAMES)])
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert)]
        + ["-days", "2", "-subj", "/CN=127.0.0.1", "-addext", f"subjectAltName={names}"],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def azurite(folder: Path, cert: Path | None = None, key: Path | None = None) -> Iterator[int]:
    """Azurite's blob service on 127.0.0.1, over HTTPS with ``cert`` and ``key``, else plain
    HTTP; yields its port."""
    install_azurite()
    port = _free_port()
    tls = ["--cert", str(cert), "--key", str(key)] if cert and key else []
    proc = subprocess.Popen(
        [str(AZURITE), "--blobHost", "127.0.0.1", "--blobPort", str(port), "--location", str(folder)]
        + [*tls, "--silent", "--skipApiVersionCheck", "--loose"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"Azurite did not start: {proc.stderr.read().decode()[-2000:] if proc.stderr else ''}"
                )
            time.sleep(0.2)
        yield port
    finally:
        os.killpg(proc.pid, 15)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:  # it may wait for idle keep-alive connections
            os.killpg(proc.pid, 9)
            proc.wait(timeout=10)


@dataclass
class Azure:
    """A running workspace: the emulator, and the environment a client needs to reach it."""

    emulator: AmlEmulator
    env: dict[str, str]
    token: str

    @property
    def config(self) -> dict[str, Any]:
        return {
            "subscriptionId": WORKSPACE["subscription"],
            "resourceGroup": WORKSPACE["resource_group"],
            "workspaceName": WORKSPACE["workspace"],
            "computeTarget": "cpu-cluster",
        }


@contextlib.contextmanager
def azure_workspace(folder: Path, token: str, images: dict[str, str] | None = None) -> Iterator[Azure]:
    from azure.storage.blob import BlobServiceClient

    folder.mkdir(parents=True, exist_ok=True)
    cert, key = make_certificate(folder)
    with azurite(folder / "azurite", cert, key) as port:
        service_side = BlobServiceClient(
            f"https://127.0.0.1:{port}/{ACCOUNT}",
            credential={"account_name": ACCOUNT, "account_key": ACCOUNT_KEY},
            connection_verify=str(cert),
        )
        with AmlEmulator(
            token,
            WORKSPACE["subscription"],
            WORKSPACE["resource_group"],
            WORKSPACE["workspace"],
            ("cpu-cluster",),
            service_side,
            ACCOUNT_KEY,
            (str(cert), str(key)),
            storage_suffix=f"trialflow.test:{port}",
            images=images,
        ) as emulator:
            env = {
                "ARM_CLOUD_METADATA_URL": f"{emulator.host}/metadata/endpoints?api-version=2019-05-01",
                "REQUESTS_CA_BUNDLE": str(cert),
                "SSL_CERT_FILE": str(cert),
                "AZURE_TOKEN_CREDENTIALS": "AzureCliCredential",
                "TRIALFLOW_TEST_AZ_TOKEN": token,
                "PATH": f"{FAKE_AZ}:{os.environ.get('PATH', '')}",
            }
            yield Azure(emulator, env, token)

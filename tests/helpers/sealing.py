"""A real Fernet key (cryptography's, as Airflow's [core] fernet_key) sealing the runs' secret
inputs in a test's process, where no Airflow installed trialflow.from_airflow.fernet."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from cryptography.fernet import Fernet

from trialflow.trial import sealing


class FernetSealer:
    def __init__(self, key: bytes | None = None) -> None:
        self.fernet = Fernet(key or Fernet.generate_key())

    def seal(self, text: str) -> str:
        return self.fernet.encrypt(text.encode()).decode()

    def unseal(self, token: str) -> str:
        return self.fernet.decrypt(token.encode()).decode()


@contextmanager
def sealed_with(sealer: sealing.Sealer | None) -> Iterator[None]:
    """``sealer`` installed for the block, what was there before put back after."""
    before = sealing.installed()
    sealing.install(sealer)
    try:
        yield
    finally:
        sealing.install(before)

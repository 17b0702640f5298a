"""Airflow's own Fernet key seals the runs' secret inputs (trialflow.trial.sealing), as it
encrypts Airflow's connections and variables: whoever may read those may read these, and a
store read without the key shows none of them."""

from __future__ import annotations

from typing import Any

from trialflow.trial import sealing


class AirflowFernet:
    """``[core] fernet_key`` (each of a rotation's keys opens; the first seals), read at first use."""

    def _fernet(self) -> Any:
        from airflow.models.crypto import get_fernet

        fernet = get_fernet()
        if not getattr(fernet, "is_encrypted", False):  # Airflow's NullFernet: no key configured
            raise sealing.SealingUnavailable(
                "a secret input is kept only encrypted, and Airflow has no [core] fernet_key to encrypt it "
                "with: set one (AIRFLOW__CORE__FERNET_KEY), as Airflow's connections need too"
            )
        return fernet

    def seal(self, text: str) -> str:
        return str(self._fernet().encrypt(text.encode("utf-8")).decode("ascii"))

    def unseal(self, token: str) -> str:
        return str(self._fernet().decrypt(token.encode("ascii")).decode("utf-8"))


def install() -> None:
    """Seal with Airflow's key in this process (every Airflow-side module imports this package)."""
    if sealing.installed() is None:
        sealing.install(AirflowFernet())

"""Airflow's own [core] fernet_key seals the runs' secret inputs (issue 64, 3), read from Airflow's
configuration at each use, as Airflow reads it for its connections."""

from __future__ import annotations

import pytest
from cryptography.fernet import Fernet, InvalidToken

from trialflow.from_airflow.fernet import AirflowFernet
from trialflow.trial.sealing import SealingUnavailable


@pytest.fixture
def key(monkeypatch):
    """Set Airflow's key (its get_fernet is cached per process, as Airflow reads it once)."""
    from airflow.models.crypto import get_fernet

    def use(value: str) -> None:
        monkeypatch.setenv("AIRFLOW__CORE__FERNET_KEY", value)
        get_fernet.cache_clear()

    yield use
    get_fernet.cache_clear()


def test_airflows_key_seals_and_a_rotated_key_still_opens(key):
    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    key(old)
    token = AirflowFernet().seal("hunter2-pw")
    assert "hunter2" not in token and AirflowFernet().unseal(token) == "hunter2-pw"
    key(f"{new},{old}")  # Airflow's rotation: the new key first
    assert AirflowFernet().unseal(token) == "hunter2-pw"
    key(new)
    with pytest.raises(InvalidToken):  # another key opens nothing
        AirflowFernet().unseal(token)


def test_without_a_key_nothing_is_sealed(key):
    key("")
    with pytest.raises(SealingUnavailable, match="Airflow has no \\[core\\] fernet_key"):
        AirflowFernet().seal("x")

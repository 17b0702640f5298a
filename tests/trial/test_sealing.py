"""Secret inputs kept sealed (issue 64, 3): what a process with and without the key reads back."""

from __future__ import annotations

import pytest

from tests.helpers.sealing import FernetSealer, sealed_with
from trialflow.trial import sealing


def test_a_sealed_value_opens_only_with_its_key():
    key = FernetSealer()
    with sealed_with(key):
        kept = sealing.seal({"nested": ["hunter2", 3]})
        assert sealing.is_sealed(kept) and "hunter2" not in str(kept)
        assert sealing.opened(kept) == {"nested": ["hunter2", 3]}
    with sealed_with(FernetSealer()):
        assert isinstance(sealing.opened(kept), sealing.SealedValue)
    with sealed_with(None):
        assert isinstance(sealing.opened(kept), sealing.SealedValue)
        with pytest.raises(sealing.SealingUnavailable):
            sealing.seal("x")


@pytest.mark.parametrize("plain", ["hunter2", 3, {"a": 1}, {sealing.SEALED_KEY: 1}, {sealing.SEALED_KEY: "t", "b": 2}])
def test_a_value_written_before_sealing_reads_back_as_it_was(plain):
    assert sealing.opened(plain) == plain and not sealing.is_sealed(plain)

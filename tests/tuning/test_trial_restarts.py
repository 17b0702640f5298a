"""The stored form of a trial's restarts read back one way: what another writer left there
(not a list, a wrong type, a missing key, a huge number as text) is left out, never raised."""

from __future__ import annotations

from trialflow.store.records import Restart, restarts_from_attr


def test_restarts_read_back_as_written_and_junk_left_out():
    good = {"attempt": 1, "step": 3, "at": 1.5, "reason": "a fault"}
    scratch = {"attempt": 2, "step": None, "at": 2.0, "reason": "again"}
    junk = [None, 7, "x", {"attempt": "one"}, {"attempt": 1}, {"attempt": 1, "at": "nan?", "reason": "r"}, [1, 2]]
    assert restarts_from_attr([good, *junk, scratch]) == (Restart(1, 3, 1.5, "a fault"), Restart(2, None, 2.0, "again"))
    for not_a_list in (None, {"attempt": 1}, "[]"):
        assert restarts_from_attr(not_a_list) == ()
    assert Restart.from_attr({**good, "step": "9" * 5000}) is None  # int() refuses digits past its limit

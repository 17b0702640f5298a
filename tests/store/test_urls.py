from __future__ import annotations

import multiprocessing
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from trialflow.store.urls import use_wal


def _open(path: str) -> str:
    try:
        use_wal(path)
        with sqlite3.connect(path, timeout=60) as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS t (x)")
            conn.execute("INSERT INTO t VALUES (1)")
        return "ok"
    except Exception as exc:  # what the assertion shows
        return repr(exc)


@pytest.mark.slow
def test_processes_switching_a_new_file_to_wal_at_once_all_succeed(tmp_path):
    # Before use_wal retried, this failed on every one of three runs with "database is locked" (CI's
    # test-lowest met it in test_many_processes_opening_a_new_store_at_once_all_find_it_current).
    context = multiprocessing.get_context("spawn")
    with context.Pool(8) as pool:
        for attempt in range(20):
            path = str(tmp_path / f"new{attempt}.db")
            results = pool.map(_open, [path] * 8)
            assert results == ["ok"] * 8, (attempt, results)
            with sqlite3.connect(path) as conn:
                assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
                assert conn.execute("SELECT count(*) FROM t").fetchone()[0] == 8


@contextmanager
def _held_by_a_writer(path) -> Iterator[None]:
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        yield
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_a_file_already_in_wal_needs_no_lock(tmp_path):
    path = tmp_path / "store.db"
    use_wal(path)
    with _held_by_a_writer(path):
        started = time.monotonic()
        use_wal(path, timeout=5)
        assert time.monotonic() - started < 3  # waiting on the writer would take the whole 5 s


def test_a_lock_that_outlasts_the_timeout_is_raised(tmp_path):
    path = tmp_path / "store.db"
    with _held_by_a_writer(path):  # not yet in WAL: switching needs the lock
        started = time.monotonic()
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            use_wal(path, timeout=0.5)
        assert time.monotonic() - started < 5


def test_an_error_other_than_a_lock_is_raised_at_once(tmp_path):
    started = time.monotonic()
    with pytest.raises(sqlite3.OperationalError, match="unable to open"):
        use_wal(tmp_path / "missing-folder" / "store.db", timeout=30)
    assert time.monotonic() - started < 10  # retrying it would take the whole 30 s

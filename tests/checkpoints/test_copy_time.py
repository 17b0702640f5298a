"""A copy into the artifact store has its time (trialflow.checkpoints.copy_time): its result or
its error when it answers, CopyTimedOut past its time, without waiting for the copy, which goes
on alone in a daemon thread; the time a copy of a size gets."""

from __future__ import annotations

import asyncio
import os
import threading
import time

import pytest

from trialflow.checkpoints.copy_time import CopyTimedOut, allowed_seconds, folder_bytes, within
from trialflow.limits import COPY_BYTES_PER_SECOND, COPY_SECONDS_FLOOR


def test_a_copy_that_answers_gives_its_result_or_its_error():
    assert asyncio.run(within(5, "checkpoint 1", lambda: 42)) == 42

    def refused() -> None:
        raise PermissionError("403 from the store")

    with pytest.raises(PermissionError, match="403"):
        asyncio.run(within(5, "checkpoint 2", refused))


def test_a_copy_past_its_time_is_given_up_on_at_once_and_ends_alone(monkeypatch):
    release, ended = threading.Event(), threading.Event()

    def hangs() -> str:
        release.wait(30)
        ended.set()
        return "late"

    started = time.monotonic()
    with pytest.raises(CopyTimedOut, match=r"the store did not take checkpoint 3 within 0 s"):
        asyncio.run(within(0.3, "checkpoint 3", hangs))  # asyncio.run does not wait for the thread
    assert time.monotonic() - started < 3
    copier = next(t for t in threading.enumerate() if t.name == "trialflow-copy-checkpoint 3")
    assert copier.daemon  # a worker process that ends does not wait for it either
    raised: list[BaseException | None] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: raised.append(args.exc_value))
    release.set()  # its late answer goes to a loop that is closed: nothing raised in the thread
    assert ended.wait(5)
    copier.join(5)
    assert not copier.is_alive() and raised == []


def test_the_time_a_copy_gets_grows_with_its_size():
    assert allowed_seconds(0) == COPY_SECONDS_FLOOR
    assert allowed_seconds(-5) == COPY_SECONDS_FLOOR
    four_gib = 4 * 1024**3
    assert allowed_seconds(four_gib) == COPY_SECONDS_FLOOR + four_gib / COPY_BYTES_PER_SECOND
    assert 600 < allowed_seconds(four_gib) < 1200  # minutes, for a checkpoint as large as allowed


def test_a_folders_size_is_what_the_keeper_lists_links_not_followed(tmp_path):
    kept = tmp_path / "checkpoints"
    (kept / "sub").mkdir(parents=True)
    (kept / "a").write_bytes(b"x" * 1000)
    (kept / "sub" / "b").write_bytes(b"y" * 24)
    with open(kept / "sparse", "wb") as fh:
        fh.truncate(1 << 40)  # 1 TiB apparent, nothing on disk: the apparent size counts
    assert folder_bytes(tmp_path, "checkpoints") == 1000 + 24 + (1 << 40)
    assert folder_bytes(tmp_path, "missing") == 0
    big = tmp_path / "elsewhere"
    big.write_bytes(b"z" * 100_000)
    os.symlink(big, kept / "link")  # refused by the keeper's listing: no size read through it
    assert folder_bytes(tmp_path, "checkpoints") == 1000 + 24 + (1 << 40)
    os.symlink(tmp_path, tmp_path / "looped")  # the folder itself a link: refused, not walked
    assert folder_bytes(tmp_path, "looped") == 0

"""Seeing remote trials end: the one-round-trip check (run by a real shell here, on folders
with hostile names and symlinks) and the per-machine loop that wakes every waiting follower."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import pytest

from trialflow.platforms.remote import endings
from trialflow.platforms.remote.commands import ended_command
from trialflow.platforms.remote.endings import MachineEndings, endings_for


def _sh(command: str) -> bytes:
    return subprocess.run(["sh", "-c", command], capture_output=True, check=True, timeout=30).stdout


def test_the_check_names_exactly_the_trials_whose_exit_code_is_written(tmp_path: Path):
    names = ["done", "running", "empty", "linked", "a dir", "q'uote", "$(touch pwned)", "nl\nx", "fifo"]
    dirs = {n: tmp_path / n for n in names}
    for d in dirs.values():
        d.mkdir()
    (dirs["done"] / "exit_code").write_text("0")
    (dirs["empty"] / "exit_code").write_text("")
    secret = tmp_path / "secret"
    secret.write_text("1")
    (dirs["linked"] / "exit_code").symlink_to(secret)  # never read through a symlink
    for hostile in ("a dir", "q'uote", "$(touch pwned)", "nl\nx"):
        (dirs[hostile] / "exit_code").write_text("2")
    subprocess.run(["mkfifo", str(dirs["fifo"] / "exit_code")], check=True)  # not a regular file: no hang
    out = _sh(ended_command([str(d) for d in dirs.values()])).decode()
    assert out.split("\n")[:-1] == [str(dirs[n]) for n in ("done", "a dir", "q'uote", "$(touch pwned)")] + [
        str(tmp_path / "nl"),
        "x",
    ]
    assert not (tmp_path / "pwned").exists() and not Path("pwned").exists()
    assert _sh(ended_command([str(dirs["running"])])) == b""


def test_one_check_per_interval_wakes_every_follower_of_a_machine(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(endings, "CHECK_INTERVAL", 0.05)
    dirs = [tmp_path / f"t{i}" for i in range(30)]
    for d in dirs:
        d.mkdir()
    commands: list[str] = []

    async def run(command: str) -> bytes:
        commands.append(command)
        proc = await asyncio.create_subprocess_exec("sh", "-c", command, stdout=subprocess.PIPE)
        out, _ = await proc.communicate()
        return out

    async def scenario() -> tuple[list[bool], bool]:
        machine = endings_for("machine-a", run)
        assert endings_for("machine-a", run) is machine and endings_for("machine-b", run) is not machine
        waits = [asyncio.create_task(machine.wait(str(d), 10.0)) for d in dirs[:29]]
        await asyncio.sleep(0.3)
        for d in dirs[:29]:
            (d / "exit_code").write_text("0")
        woken = await asyncio.gather(*waits)
        timed_out = await machine.wait(str(dirs[29]), 0.2)  # never ends: the wait gives up
        return woken, timed_out

    woken, timed_out = asyncio.run(scenario())
    assert woken == [True] * 29 and not timed_out  # woken by a check, well before their 10 s
    # each check is one command naming every waiting follower's folder, not one per follower
    assert commands and all(c.count(str(tmp_path)) == 29 for c in commands[:3])


def test_a_failing_machine_ends_no_wait_early_and_the_loop_stops_when_nobody_waits(monkeypatch):
    monkeypatch.setattr(endings, "CHECK_INTERVAL", 0.02)
    calls = 0

    async def broken(command: str) -> bytes:
        nonlocal calls
        calls += 1
        raise OSError("connection lost")

    async def scenario() -> tuple[bool, int]:
        machine = MachineEndings(broken)
        waited = await machine.wait("/nowhere/t0", 0.2)
        seen = calls
        await asyncio.sleep(0.2)  # nobody waits: the loop has ended
        return waited, calls - seen

    waited, after = asyncio.run(scenario())
    assert waited is False and calls >= 2 and after <= 1


@pytest.mark.parametrize("count", [1, 450])
def test_many_folders_are_split_over_commands_of_bounded_length(tmp_path: Path, count: int):
    dirs = [str(tmp_path / f"trial-{i:04d}") for i in range(count)]
    for start in range(0, count, endings.DIRS_PER_COMMAND):
        command = ended_command(dirs[start : start + endings.DIRS_PER_COMMAND])
        assert len(command) < 128 * 1024  # far under Linux's per-argument limit
        assert _sh(command) == b""

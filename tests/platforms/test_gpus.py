"""GPU choice and claims, from nvidia-smi's CSV: every rule of the table, exhaustively."""

from __future__ import annotations

import pytest

from trialflow.platforms.gpus import (
    Gpu,
    GpuRequestError,
    check_request,
    choose,
    claim_name,
    claimed_slots,
    parse_claim_name,
    parse_gpus,
)

GPU_CSV = """\
0, GPU-aaaa, 10, 16384
1, GPU-bbbb, 5000, 16384
2, GPU-cccc, 0, 16384
3, GPU-dddd, 0, 16384
"""
APPS_CSV = "GPU-bbbb, 4242\nGPU-bbbb, 4243\n"


def four(foreign_on: tuple[int, ...] = ()) -> list[Gpu]:
    return [Gpu(i, f"u{i}", foreign_processes=1 if i in foreign_on else 0) for i in range(4)]


def test_parse_gpus_counts_processes_per_gpu():
    gpus = parse_gpus(GPU_CSV, APPS_CSV)
    assert [g.index for g in gpus] == [0, 1, 2, 3]
    assert [g.foreign_processes for g in gpus] == [0, 2, 0, 0]
    assert gpus[1].memory_used_mb == 5000 and gpus[1].memory_total_mb == 16384


def test_parse_gpus_tolerates_noise():
    assert parse_gpus("\n[Not Supported], x\n0, GPU-a, [N/A], 100\n") == [Gpu(0, "GPU-a", 0, 100, 0)]


@pytest.mark.parametrize(
    "need, claimed, per_gpu, indices, active, foreign, expected",
    [
        (1, {}, 1, None, False, (), [(0, 0)]),
        (2, {}, 1, None, False, (), [(0, 0), (1, 0)]),
        (4, {}, 1, None, False, (), [(0, 0), (1, 0), (2, 0), (3, 0)]),  # all GPUs of the machine: scheduled
        (1, {}, 1, None, False, (0,), [(1, 0)]),  # GPU 0 is someone else's
        (4, {}, 1, None, False, (0,), None),  # wait for it
        (4, {}, 1, None, True, (0,), [(0, 0), (1, 0), (2, 0), (3, 0)]),  # useActiveGpu
        (1, {0: {0}}, 1, None, False, (0,), [(1, 0)]),  # our own trial's process on 0
        (1, {0: {0}, 1: {0}, 2: {0}, 3: {0}}, 1, None, False, (), None),  # full
        (1, {0: {0}, 1: {0}, 2: {0}, 3: {0}}, 2, None, False, (), [(0, 1)]),  # maxTrialNumberPerGpu 2
        (1, {0: {1}}, 2, None, False, (), [(1, 0)]),  # least used first
        (1, {0: {1}, 1: {0}, 2: {0}, 3: {0}}, 2, None, False, (), [(0, 0)]),  # a released slot is reused
        (1, {}, 1, [2, 3], False, (), [(2, 0)]),  # gpuIndices
        (2, {2: {0}}, 1, [2, 3], False, (), None),
    ],
)
def test_choose(need, claimed, per_gpu, indices, active, foreign, expected):
    assert choose(four(foreign), claimed, need, per_gpu, indices, active) == expected


@pytest.mark.parametrize(
    "need, indices, message",
    [
        (5, None, "trialGpuNumber 5 can never fit on box: it may use 4 GPU(s) (0, 1, 2, 3)"),
        (3, [1, 2], "it may use 2 GPU(s) (1, 2; limited by gpuIndices)"),
        (1, [7], "it may use 0 GPU(s) (none; limited by gpuIndices)"),
    ],
)
def test_a_request_that_can_never_fit_is_an_error_now(need, indices, message):
    with pytest.raises(GpuRequestError, match=message.replace("(", r"\(").replace(")", r"\)")):
        check_request(four(), indices, need, "box")
    check_request(four(), None, 4, "box")  # exactly all: fine


def test_claim_names_round_trip():
    assert parse_claim_name(claim_name(3, 1)) == (3, 1)
    assert parse_claim_name("gpu-x") is None and parse_claim_name("owner") is None
    assert claimed_slots(["gpu0-slot0", "gpu0-slot1", "gpu2-slot0", "junk"]) == {0: {0, 1}, 2: {0}}


# -- the claim protocol, run for real (bash, mkdir, the fake nvidia-smi on PATH) ---------------

import asyncio  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
from pathlib import Path  # noqa: E402

from trialflow.platforms.gpus import GpuRequest, acquire, release_command  # noqa: E402


def _ask(claims: Path, need: int, per_gpu: int, owner: str) -> GpuRequest:
    return GpuRequest(str(claims), need, per_gpu, None, False, owner, "here")


FAKES = Path(__file__).resolve().parents[1] / "helpers" / "fakes"


@pytest.fixture
def machine(tmp_path, monkeypatch):
    """A 'machine' whose nvidia-smi is the fake, describing 4 GPUs."""
    state = tmp_path / "gpus.json"
    state.write_text(json.dumps({"gpus": ["GPU-0", "GPU-1", "GPU-2", "GPU-3"], "apps": []}))
    monkeypatch.setenv("FAKE_GPUS", str(state))
    monkeypatch.setenv("PATH", f"{FAKES}:{os.environ['PATH']}")

    async def run(command: str) -> str:
        return subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=30).stdout

    return run, tmp_path / "claims", state


def _owner(tmp_path: Path, name: str, pid: int | None = None) -> str:
    folder = tmp_path / name
    (folder / ".trialflow").mkdir(parents=True, exist_ok=True)
    if pid is not None:
        (folder / ".trialflow" / "pid").write_text(f"{pid} 0")
    return str(folder)


def test_concurrent_trials_never_share_a_slot(machine, tmp_path):
    run, claims, _ = machine

    async def eight() -> list:
        owners = [_owner(tmp_path, f"t{i}", os.getpid()) for i in range(8)]
        return await asyncio.gather(*(acquire(run, _ask(claims, 1, 2, o), 0.05) for o in owners))

    picks = asyncio.run(eight())
    flat = [p for pick in picks for p in pick]
    assert len(set(flat)) == 8 and {i for i, _ in flat} == {0, 1, 2, 3}  # 4 GPUs x 2 slots, all distinct
    assert sorted(p.name for p in claims.iterdir()) == sorted(f"gpu{i}-slot{s}" for i, s in flat)


def test_a_trial_waits_for_a_busy_gpu_then_gets_it(machine, tmp_path):
    run, claims, state = machine
    state.write_text(json.dumps({"gpus": ["GPU-0"], "apps": [["GPU-0", 999999]]}))  # someone else's process
    waits: list[str] = []

    async def scenario() -> list:
        task = asyncio.create_task(
            acquire(run, _ask(claims, 1, 1, _owner(tmp_path, "t", os.getpid())), 0.05, waits.append)
        )
        await asyncio.sleep(0.5)
        assert not task.done()
        state.write_text(json.dumps({"gpus": ["GPU-0"], "apps": []}))  # it finished
        return await asyncio.wait_for(task, 10)

    assert asyncio.run(scenario()) == [(0, 0)]
    assert waits == ["waiting for 1 free GPU(s) on here"]


def test_claims_of_dead_or_finished_trials_are_recovered(machine, tmp_path):
    run, claims, _ = machine
    dead = subprocess.Popen(["true"])
    dead.wait()
    asyncio.run(acquire(run, _ask(claims, 2, 1, _owner(tmp_path, "dead", dead.pid)), 0.05))
    finished = _owner(tmp_path, "finished", os.getpid())
    asyncio.run(acquire(run, _ask(claims, 2, 1, finished), 0.05))
    (Path(finished) / ".nni").mkdir()
    (Path(finished) / ".nni" / "state").write_text("0 1")
    # all 4 GPUs were claimed; both owners are gone, so a 4-GPU trial gets the whole machine
    picks = asyncio.run(acquire(run, _ask(claims, 4, 1, _owner(tmp_path, "big", os.getpid())), 0.05))
    assert picks == [(0, 0), (1, 0), (2, 0), (3, 0)]
    asyncio.run(run(release_command(str(claims), picks)))
    assert list(claims.iterdir()) == []


def test_never_fitting_and_missing_nvidia_smi_are_errors(machine, tmp_path, monkeypatch):
    run, claims, _ = machine
    with pytest.raises(GpuRequestError, match="trialGpuNumber 5 can never fit on here"):
        asyncio.run(acquire(run, _ask(claims, 5, 1, _owner(tmp_path, "t"))))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    with pytest.raises(GpuRequestError, match="needs nvidia-smi on here"):
        asyncio.run(acquire(run, _ask(claims, 1, 1, _owner(tmp_path, "t"))))

"""GPU scheduling for local and remote trials: read the GPUs, choose, claim atomically.

What NNI users hit: trials that never start while another process uses a GPU,
several trials on one GPU, maxTrialNumberPerGpu ignored, and a trial that asks
for all GPUs of a machine never scheduled (NNI 3.0). Here:

- GPUs come from ``nvidia-smi --query-gpu`` and ``--query-compute-apps`` (CSV).
- A GPU with a process that is not one of our trials is busy, unless
  ``useActiveGpu``; each GPU takes at most ``maxTrialNumberPerGpu`` trials;
  ``gpuIndices`` limits which GPUs are used at all.
- A claim is one folder per (GPU, slot), made with ``mkdir`` (atomic locally
  and over SSH), holding the trial folder it belongs to. Trial tasks running
  at once can never take the same slot. A claim is released when its trial
  ends (the trial's wrapper removes it) and recovered when its trial is gone
  (a worker that died mid-launch, a killed trial).
- A request that can never fit (more GPUs than the machine may use) is an
  error at once, not an endless WAITING.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from trialflow.config.units import whole_number

GPU_QUERY = "nvidia-smi --query-gpu=index,uuid,memory.used,memory.total --format=csv,noheader,nounits"
APPS_QUERY = "nvidia-smi --query-compute-apps=gpu_uuid,pid --format=csv,noheader,nounits"
CLAIMS_DIR = ".gpu-claims"


class GpuRequestError(ValueError):
    """A trial asks for GPUs a machine can never give it."""


@dataclass(frozen=True)
class Gpu:
    index: int
    uuid: str
    memory_used_mb: int = 0
    memory_total_mb: int = 0
    foreign_processes: int = 0


def _rows(text: str) -> list[list[str]]:
    return [
        [cell.strip() for cell in row] for row in csv.reader(io.StringIO(text)) if row and any(c.strip() for c in row)
    ]


def parse_gpus(gpu_csv: str, apps_csv: str = "") -> list[Gpu]:
    """The GPUs of one machine, with how many compute processes each runs, from nvidia-smi's CSV."""
    apps: dict[str, int] = {}
    for row in _rows(apps_csv):
        if len(row) >= 2 and whole_number(row[1]) is not None:
            apps[row[0]] = apps.get(row[0], 0) + 1
    gpus = []
    for row in _rows(gpu_csv):
        if len(row) < 2 or whole_number(row[0]) is None:
            continue

        def number(cell: str) -> int:
            try:
                return int(float(cell))
            except ValueError:
                return 0

        gpus.append(
            Gpu(
                int(row[0]),
                row[1],
                number(row[2]) if len(row) > 2 else 0,
                number(row[3]) if len(row) > 3 else 0,
                apps.get(row[1], 0),
            )
        )
    return sorted(gpus, key=lambda g: g.index)


def usable(gpus: list[Gpu], gpu_indices: list[int] | None) -> list[Gpu]:
    allowed = set(gpu_indices) if gpu_indices is not None else None
    return [g for g in gpus if allowed is None or g.index in allowed]


def check_request(gpus: list[Gpu], gpu_indices: list[int] | None, need: int, where: str) -> None:
    """GpuRequestError if ``need`` GPUs can never be had on this machine."""
    have = usable(gpus, gpu_indices)
    if need > len(have):
        listed = ", ".join(str(g.index) for g in have) or "none"
        raise GpuRequestError(
            f"trialGpuNumber {need} can never fit on {where}: it may use {len(have)} GPU(s) ({listed}"
            f"{'; limited by gpuIndices' if gpu_indices is not None else ''})"
        )


def choose(
    gpus: list[Gpu],
    claimed: dict[int, set[int]],
    need: int,
    per_gpu: int,
    gpu_indices: list[int] | None,
    use_active_gpu: bool,
) -> list[tuple[int, int]] | None:
    """``need`` distinct GPUs as (index, free slot) to claim now, or None if not free yet.

    ``claimed``: GPU index -> slots our trials hold. A GPU with processes is someone
    else's unless we hold a slot on it (then the processes are our trials'); it is
    skipped unless ``use_active_gpu``. Least-used GPUs first, then the lowest index.
    """
    free = []
    for gpu in usable(gpus, gpu_indices):
        taken = claimed.get(gpu.index, set())
        if gpu.foreign_processes and not taken and not use_active_gpu:
            continue
        slots = [s for s in range(per_gpu) if s not in taken]
        if slots:
            free.append((len(taken), gpu.index, slots[0]))
    if len(free) < need:
        return None
    return sorted((index, slot) for _, index, slot in sorted(free)[:need])


def claim_name(index: int, slot: int) -> str:
    return f"gpu{index}-slot{slot}"


def parse_claim_name(name: str) -> tuple[int, int] | None:
    if not name.startswith("gpu") or "-slot" not in name:
        return None
    gpu, _, slot = name[3:].partition("-slot")
    number, place = whole_number(gpu), whole_number(slot)
    return None if number is None or place is None else (number, place)


def claimed_slots(names: list[str]) -> dict[int, set[int]]:
    """GPU index -> claimed slots, from the claim folders' names."""
    out: dict[int, set[int]] = {}
    for name in names:
        parsed = parse_claim_name(name)
        if parsed:
            out.setdefault(parsed[0], set()).add(parsed[1])
    return out


# -- claims: shell builders, run locally (bash) and over SSH alike ---------------------------

#: A claim whose trial never recorded a pid is given up after this long (a worker died mid-launch).
UNLAUNCHED_CLAIM_SECONDS = 120


def survey_command(claims_dir: str) -> str:
    """Recover claims of trials that are gone, then print the claims, a marker, and both
    nvidia-smi queries (exit status 127 inside the output when nvidia-smi is missing)."""
    import shlex

    d = shlex.quote(claims_dir)
    return (
        f'mkdir -p {d}; for c in {d}/gpu*-slot*; do [ -d "$c" ] || continue; '
        'o="$(cat "$c/owner" 2>/dev/null)"; gone=0; '
        'if [ -z "$o" ]; then [ -n "$(find "$c" -maxdepth 0 -mmin +2 2>/dev/null)" ] && gone=1; '
        'elif [ -e "$o/exit_code" ] || [ -e "$o/.nni/state" ]; then gone=1; '
        'else p="$(cut -d" " -f1 "$o/.trialflow/pid" 2>/dev/null || cat "$o/pid" 2>/dev/null)"; '
        'if [ -n "$p" ]; then kill -0 "$p" 2>/dev/null || gone=1; '
        f'elif [ -n "$(find "$c" -maxdepth 0 -mmin +{UNLAUNCHED_CLAIM_SECONDS // 60} 2>/dev/null)" ]; '
        "then gone=1; fi; fi; "
        '[ "$gone" = 1 ] && rm -rf "$c"; done; '
        f"ls {d}; echo '--gpus--'; {GPU_QUERY} 2>&1; echo \"rc=$?\"; echo '--apps--'; {APPS_QUERY} 2>/dev/null; true"
    )


def parse_survey(output: str) -> tuple[list[str], str, int, str]:
    """(claim names, GPU CSV, nvidia-smi exit status, apps CSV) from survey_command's output."""
    claims, _, rest = output.partition("--gpus--\n")
    gpus, _, apps = rest.partition("--apps--\n")
    lines = gpus.rstrip("\n").split("\n")
    status = int(lines[-1][3:]) if lines and lines[-1].startswith("rc=") else 127
    return claims.split(), "\n".join(lines[:-1]), status, apps


def claim_command(claims_dir: str, picks: list[tuple[int, int]], owner: str) -> str:
    """Claim every pick or none (mkdir is atomic); prints ``claimed`` on success."""
    import shlex

    paths = [shlex.quote(f"{claims_dir}/{claim_name(i, s)}") for i, s in picks]
    made = " ".join(paths)
    return (
        f'got=\'\'; for c in {made}; do if mkdir "$c" 2>/dev/null; then got="$got $c"; '
        f'printf %s {shlex.quote(owner)} > "$c/owner"; else rm -rf $got; echo busy; exit 0; fi; done; '
        "echo claimed"
    )


def release_command(claims_dir: str, picks: list[tuple[int, int]]) -> str:
    import shlex

    return "rm -rf " + " ".join(shlex.quote(f"{claims_dir}/{claim_name(i, s)}") for i, s in picks)


@dataclass(frozen=True)
class GpuRequest:
    """One trial's ask for GPUs on one machine: where the claims live, how many it needs,
    the machine's sharing rules, who owns the claims (the trial's folder) and the machine's
    name for messages."""

    claims_dir: str
    need: int
    per_gpu: int
    gpu_indices: list[int] | None
    use_active_gpu: bool
    owner: str
    where: str


async def attempt(run: Callable[[str], Awaitable[str]], request: GpuRequest) -> list[tuple[int, int]] | None:
    """One look at one machine: the claimed (GPU, slot)s, or None when they are taken now;
    GpuRequestError when they can never be had there or nvidia-smi is missing."""
    r = request
    while True:
        claims, gpu_csv, status, apps = parse_survey(await run(survey_command(r.claims_dir)))
        if status != 0:
            raise GpuRequestError(
                f"trialGpuNumber {r.need} needs nvidia-smi on {r.where}; it failed ({status}): {gpu_csv.strip()[-300:]}"
            )
        gpus = parse_gpus(gpu_csv, apps)
        check_request(gpus, r.gpu_indices, r.need, r.where)
        picks = choose(gpus, claimed_slots(claims), r.need, r.per_gpu, r.gpu_indices, r.use_active_gpu)
        if picks is None:
            return None
        if (await run(claim_command(r.claims_dir, picks, r.owner))).strip().endswith("claimed"):
            return picks
        # another trial took a slot between the survey and the claim: look again


async def acquire(
    run: Callable[[str], Awaitable[str]],
    request: GpuRequest,
    poll_seconds: float = 2.0,
    on_wait: Callable[[str], None] | None = None,
) -> list[tuple[int, int]]:
    """Claim the request's GPUs on one machine, waiting while they are taken; GpuRequestError
    at once when they can never be had or nvidia-smi is missing."""
    import asyncio

    waited = False
    while True:
        picks = await attempt(run, request)
        if picks is not None:
            return picks
        if not waited and on_wait is not None:
            on_wait(f"waiting for {request.need} free GPU(s) on {request.where}")
        waited = True
        await asyncio.sleep(poll_seconds)

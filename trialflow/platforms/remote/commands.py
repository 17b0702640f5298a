"""The shell commands the remote platform sends over SSH: pure builders, nothing else.

Every value that reaches a command (folders under a machine's ``$HOME``,
pythonPath, the trial command, environment values) goes through
``shlex.quote`` exactly once, at the point where it becomes shell text, and is
never spliced into a string that a shell parses a second time. (The SSH
provider's detached-job wrapper, used before, spliced its paths into a
script that ``bash -c`` parsed again: a folder with a quote, ``$(...)`` or a
backquote in its name ran as a command.) tests/security/test_quoting.py runs
each of them with hostile values in every field.

Layout of a trial folder: ``pid`` (written by the detached job itself),
``stdout.log`` (its output: NNI's metric lines), ``stderr``, ``exit_code``
(written atomically last), ``cancel.json``, ``.launching`` and ``.launched``
(atomic mkdir guards).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence

from trialflow.trial.packing import sdk_pythonpath

CANCEL_FILE = "cancel.json"
LAUNCH_DIR = ".launching"
READ_CHUNK = 4 * 1024 * 1024
SEPARATOR = b"\n--trialflow-metrics--\n"  # what `echo; echo --trialflow-metrics--` prints
#: The detached job's output file (NNISDK_MEb metric lines among the trial's own output).
METRICS_SOURCE = "stdout.log"


def read_file(name: str, offset: int = 0, max_bytes: int = 4096) -> str:
    """Shell text that prints up to ``max_bytes`` of ``name`` (a file in the current folder,
    the trial's) from ``offset``, and nothing when it is not a regular file there.

    The trial's code owns its folder: a symlink where its output or exit code was would show
    another file (say /etc/shadow) to whoever reads the result, and a FIFO would hang the
    poll. GNU dd opens with O_NOFOLLOW and O_NONBLOCK (``iflag=nofollow,nonblock``), and
    ``[ -f ]`` before it refuses what is not a regular file (a FIFO swapped in between the two
    still cannot block: the open does not wait and its read finds nothing). Remote machines
    need GNU coreutils, as NNI's remote mode assumed Linux."""
    return _safe_dd(shlex.quote(name), str(int(offset)), int(max_bytes))


def _safe_dd(quoted: str, skip: str, count: int) -> str:
    """``skip`` is a shell word: a number, or an arithmetic expansion this module built."""
    return (
        f"{{ [ -f {quoted} ] && [ ! -L {quoted} ] && dd if={quoted} iflag=nofollow,nonblock,skip_bytes,count_bytes "
        f"skip={skip} count={count} bs=65536 status=none; }} 2>/dev/null"
    )


def tail_command(trial_dir: str, name: str, max_bytes: int = 4096) -> str:
    """The last ``max_bytes`` of the trial's file ``name`` (its stderr, for a failed trial's
    message), read as :func:`read_file` reads: no symlink, no FIFO."""
    q, n = shlex.quote(name), int(max_bytes)
    return (
        f'cd {shlex.quote(trial_dir)} 2>/dev/null && s="$(stat -c %s {q} 2>/dev/null || echo 0)" && '
        f"{_safe_dd(q, f'$((s > {n} ? s - {n} : 0))', n)}; true"
    )


def probe_command(trial_dir: str, offset: int, max_bytes: int = READ_CHUNK) -> str:
    """One round trip per poll: status facts as key=value lines, a separator, then the trial's
    stdout after ``offset`` (off the local platform, nni and trialflow's SDK report metrics as
    ``NNISDK_MEb'...'`` lines on stdout)."""
    d = shlex.quote(trial_dir)
    return (
        f"cd {d} 2>/dev/null || {{ echo missing=1; exit 0; }}; "
        # liveness before the exit code: a wrapper found gone has written it
        f'p="$({read_file("pid")})"; echo "pid=$p"; '
        'if [ -n "$p" ] && kill -0 "$p" 2>/dev/null; then echo alive=1; else echo alive=0; fi; '
        f'echo "exit=$({read_file("exit_code")})"; '
        f'echo "cancel=$({read_file(CANCEL_FILE, max_bytes=65536)})"; '
        "echo; echo --trialflow-metrics--; "
        f"{read_file(METRICS_SOURCE, offset, max_bytes)}; true"
    )


def read_command(trial_dir: str, offset: int, max_bytes: int = READ_CHUNK) -> str:
    """The trial's stdout after ``offset``, at most ``max_bytes`` (the rest of an ended trial's
    output, when a poll's chunk was full)."""
    return f"cd {shlex.quote(trial_dir)} && {read_file(METRICS_SOURCE, offset, max_bytes)}; true"


def parse_probe(output: bytes) -> tuple[dict[str, str], bytes]:
    head, _, metrics = output.partition(SEPARATOR)
    facts = {}
    for line in head.decode("utf-8", "replace").splitlines():
        key, _, value = line.partition("=")
        facts[key] = value
    return facts, metrics


def staging_command(base: str, digest: str, archive: str, python: str) -> str:
    """Unpack ``archive`` to ``<base>/.code/<digest>`` unless it is there; a racing twin's
    result is kept (rename is atomic), and the code is made read-only."""
    final = f"{base}/.code/{digest}"
    tmp = shlex.quote(f"{final}.tmp.") + '"$$"'  # quoted path, then this shell's pid
    uploads = f"{shlex.quote(archive)} {shlex.quote(archive)}.py"
    return (
        # the uploaded archive and its unpacker go whatever happens: staged, present, or refused
        f"trap {shlex.quote('rm -f ' + uploads)} EXIT; "
        f"set -e; if [ -e {shlex.quote(final)}/.complete ]; "
        f"then echo present; exit 0; fi; "
        f"mkdir -p {shlex.quote(base)}/.code; rm -rf {tmp}; "
        f"{shlex.quote(python)} - {shlex.quote(archive)} {tmp} < {shlex.quote(archive)}.py; "
        f"chmod -R a-w {tmp}; chmod u+w {tmp}; touch {tmp}/.complete; chmod u-w {tmp}; "
        f"mv -T {tmp} {shlex.quote(final)} 2>/dev/null || {{ chmod -R u+w {tmp}; rm -rf {tmp}; }}; "
        "echo staged"
    )


def launch_command(body: str, trial_dir: str, env: Mapping[str, str]) -> str:
    """Run ``body`` (already shell text) detached from the SSH session, in a session of its own:
    its pid recorded first, its output to stdout.log, its exit code written atomically last.

    The job script is handed to ``bash -c`` as one quoted word, so nothing in it is parsed
    twice; ``setsid`` keeps a dropped SSH connection from hanging up the trial (nohup where
    there is no setsid).
    """
    d = shlex.quote(trial_dir)
    exports = "".join(f"export {name}={shlex.quote(value)}\n" for name, value in env.items() if name.isidentifier())
    job = (
        f'echo "$$" > {d}/pid.tmp && mv -f {d}/pid.tmp {d}/pid\n'
        f"{exports}"
        f"{{\n{body}\n}} >> {d}/{METRICS_SOURCE} 2>&1\n"
        f"ec=$?\n"
        f'printf %s "$ec" > {d}/exit_code.tmp && mv -f {d}/exit_code.tmp {d}/exit_code\n'
    )
    job_word = shlex.quote(job)
    return (
        f"set -eu\nmkdir -p {d}\n: > {d}/{METRICS_SOURCE}\n"
        "if command -v setsid >/dev/null 2>&1; then\n"
        f"  setsid bash -c {job_word} </dev/null >/dev/null 2>&1 &\n"
        "else\n"
        f"  nohup bash -c {job_word} </dev/null >/dev/null 2>&1 &\n"
        "fi\n"
    )


def kill_command(trial_dir: str, grace_seconds: float) -> str:
    """TERM the trial's process group (its pid leads it: setsid), KILL it if it is still there
    after ``grace_seconds``. A pid that is not an integer above 1 is never signalled (``kill
    -0`` or ``-1`` would reach every process of the account)."""
    steps = max(1, int(grace_seconds * 10))
    return (
        f'p="$(cd {shlex.quote(trial_dir)} 2>/dev/null && {read_file("pid")})"; '
        'case "$p" in ""|*[!0-9]*) p=0;; esac; '
        'if [ "$p" -gt 1 ]; then kill -TERM -- -"$p" 2>/dev/null || kill -TERM "$p" 2>/dev/null; '
        f'i=0; while [ $i -lt {steps} ] && kill -0 -- -"$p" 2>/dev/null; do sleep 0.1; i=$((i+1)); done; '
        'if kill -0 -- -"$p" 2>/dev/null; then kill -KILL -- -"$p" 2>/dev/null; fi; fi; true'
    )


def detached_command(script: str) -> str:
    """Run ``script`` in a session of its own on the machine and return at once: it outlives the
    SSH connection that started it and the process that asked (a stop's escalation to SIGKILL
    after its grace must happen even when the asker, an Airflow task in its on_kill, is SIGKILLed
    before the grace ends, and its SSH session with it)."""
    word = shlex.quote(script)
    return (
        "if command -v setsid >/dev/null 2>&1; then "
        f"setsid bash -c {word} </dev/null >/dev/null 2>&1 & "
        f"else nohup bash -c {word} </dev/null >/dev/null 2>&1 & fi"
    )


def cleanup_command(root: str) -> str:
    """Remove an experiment's folder. Folders are made writable first, not files: the trials'
    code files are hard links of the staged copy, which must stay read-only for later
    experiments."""
    q = shlex.quote(root)
    return f"find {q} -type d -exec chmod u+w {{}} + 2>/dev/null; rm -rf -- {q}"


def exists_command(path: str, kind: str = "e") -> str:
    """Prints ``yes`` when ``path`` exists (``kind`` is test's flag: ``e`` anything, ``d`` a
    folder); never fails, so an absent path is an answer rather than an SSH error."""
    if kind not in ("e", "d", "f"):
        raise ValueError(f"test flag must be e, d or f, not {kind!r}")
    return f"test -{kind} {shlex.quote(path)} && echo yes || true"


def mkdir_command(folder: str) -> str:
    return f"mkdir -p {shlex.quote(folder)}"


def upload_command(folder: str, target: str) -> str:
    """Write stdin to ``target``, making ``folder`` first (an archive or the unpacker)."""
    return f"mkdir -p {shlex.quote(folder)} && cat > {shlex.quote(target)}"


def remove_file_command(path: str) -> str:
    """Remove one file (an upload that did not complete); absent is fine."""
    return f"rm -f {shlex.quote(path)}"


def running_count_command(trials_dir: str) -> str:
    """How many trials under ``trials_dir`` were launched and have not ended (for placement)."""
    return (
        f'n=0; for d in {shlex.quote(trials_dir)}/*/; do [ -e "$d/{LAUNCH_DIR}" ] && '
        '[ ! -e "$d/exit_code" ] && n=$((n+1)); done; echo $n'
    )


def claim_command(trial_dir: str) -> str:
    """Prints ``claimed`` for the one caller that creates the trial's launch folder: mkdir is
    atomic, so of two racing submits for one trial id exactly one launches."""
    q = shlex.quote(trial_dir)
    return f"mkdir -p {q} && mkdir {q}/{LAUNCH_DIR} 2>/dev/null && echo claimed || true"


def launch_state_command(trial_dir: str) -> str:
    """Where a trial's launch stands, for a submit that finds its folder: ``launched`` (the
    launch script ran, or its detached job wrote a pid), ``claimed <seconds>`` (a submit
    claimed it that long ago and has not launched yet), or ``none``."""
    q = shlex.quote(trial_dir)
    return (
        f"cd {q} 2>/dev/null || {{ echo none; exit 0; }}; "
        "if [ -e .launched ] || [ -s pid ]; then echo launched; "
        f'elif [ -d {LAUNCH_DIR} ]; then echo "claimed $(( $(date +%s) - $(stat -c %Y {LAUNCH_DIR}) ))"; '
        "else echo none; fi"
    )


def parse_launch_state(output: str) -> tuple[str, float]:
    """(state, seconds since the claim) from launch_state_command's output."""
    state, _, age = output.strip().partition(" ")
    try:
        return state or "none", float(age) if age else 0.0
    except ValueError:
        return state, 0.0


def take_over_command(trial_dir: str, stale_after: float) -> str:
    """Prints ``claimed`` for the one caller that takes over a stale claim (a submit that died
    between claiming the folder and launching). The claim is renamed away first (rename is
    atomic: of two takers one gets it, the other finds nothing to rename), then checked: a
    claim younger than ``stale_after`` seconds (another taker's fresh one) or a trial that
    has launched meanwhile is put back untouched. Otherwise the half-written working
    directory is removed and the claim is made again, for this caller."""
    q = shlex.quote(trial_dir)
    return (
        f"cd {q} 2>/dev/null || exit 0; "
        f'stale=.stale-claim.$$; mv {LAUNCH_DIR} "$stale" 2>/dev/null || exit 0; '
        f'if [ -e .launched ] || [ -s pid ] || [ $(( $(date +%s) - $(stat -c %Y "$stale") )) -lt {int(stale_after)} ]; '
        f'then mv "$stale" {LAUNCH_DIR}; exit 0; fi; '
        f'rm -rf "$stale" code parameter.cfg parameter.cfg.tmp .nni && mkdir {LAUNCH_DIR} && echo claimed'
    )


def workdir_command(trial_dir: str, code_folder: str, in_place: bool) -> str:
    """Write stdin to the trial's parameter.cfg (atomically) and give the trial its working
    directory: on shared storage the code in place (a symlink); otherwise a hard-linked view
    of the staged copy whose files stay shared and read-only and whose folders are its own."""
    q, code = shlex.quote(trial_dir), shlex.quote(code_folder)
    view = (
        f"ln -s {code} {q}/code"
        if in_place
        else f"cp -al {code} {q}/code && find {q}/code -type d -exec chmod u+w {{}} +"
    )
    return f"mkdir -p {q}/.nni && cat > {q}/parameter.cfg.tmp && mv {q}/parameter.cfg.tmp {q}/parameter.cfg && {view}"


def launch_once_guard(trial_dir: str) -> str:
    """The first line of a launch script: running it twice (a retry after a dropped
    connection) launches once."""
    return f"mkdir {shlex.quote(trial_dir)}/.launched 2>/dev/null || exit 0\n"


def path_prefix(python_path: str | None) -> str:
    """NNI's pythonPath: first on PATH for the trial (and for nvidia-smi)."""
    return f'export PATH={shlex.quote(python_path)}:"$PATH"\n' if python_path else ""


def trial_body(trial_dir: str, command: str, sdk_dir: str, python_path: str | None, after: Sequence[str]) -> str:
    """What the detached job runs: pythonPath first on PATH, the SDK on PYTHONPATH, the trial's
    code view as the working directory, stderr to its own file; then each of ``after`` (shell
    text: stop the processes the trial left, release its GPUs), keeping the trial's exit code.
    A subshell, so the job still sees that exit code."""
    q = shlex.quote(trial_dir)
    run = f"cd {q}/code && bash -c {shlex.quote(command)} 2>{q}/stderr </dev/null"
    steps = "".join(f"{step}; " for step in after if step)
    sdk = shlex.quote(sdk_pythonpath(sdk_dir))
    return (
        f"{path_prefix(python_path)}export PYTHONPATH={sdk}${{PYTHONPATH:+:$PYTHONPATH}}\n"
        f"( {run}; rc=$?; {steps}exit $rc )"
    )


def cancel_request_command(trial_dir: str) -> str:
    """Record why a trial is stopped (stdin: the request's JSON), unless it already succeeded
    or a request is there: the first reason wins, as the status it reports."""
    q = shlex.quote(trial_dir)
    return (
        f'[ -e {q}/exit_code ] && [ "$(cat {q}/exit_code)" = 0 ] && exit 0; '
        f"[ -e {q}/{CANCEL_FILE} ] || {{ cat > {q}/{CANCEL_FILE}.tmp && "
        f"mv {q}/{CANCEL_FILE}.tmp {q}/{CANCEL_FILE}; }}"
    )


def ended_command(trial_dirs: list[str]) -> str:
    """One round trip for many trials of a machine: print each of ``trial_dirs`` whose exit
    code is written (a non-empty regular file, never through a symlink), and nothing else."""
    quoted = " ".join(shlex.quote(d) for d in trial_dirs)
    test = '[ -f "$d/exit_code" ] && [ ! -L "$d/exit_code" ] && [ -s "$d/exit_code" ]'
    return f'for d in {quoted}; do {test} && printf "%s\\n" "$d"; done; true'


#: What a tar archive adds to its files' sizes (a header per file, padding), at most, for the
#: MAX_LISTED_FILES a kept folder may hold.
ARCHIVE_OVERHEAD = 16 * 1024 * 1024


def output_archive_command(trial_dir: str, relative: str, max_bytes: int | None = None) -> str:
    """A tar archive of the trial's output folder ``relative`` (``checkpoints/<step>``,
    ``artifacts``) on stdout; nothing when there is no such folder. tar stores a symbolic link
    as a link, never what it points to: the checking extraction here refuses what leads
    outside, and the keeper refuses any link. With ``max_bytes``, no more than that (and the
    archive's overhead) and one byte comes back (a 1 TiB sparse file is cut short there, and
    tar stops at the closed pipe): more means past the bound (archive_within)."""
    q, r = shlex.quote(trial_dir), shlex.quote(relative)
    bounded = "" if max_bytes is None else f" | head -c {int(max_bytes) + ARCHIVE_OVERHEAD + 1}"
    return f"cd {q} && if [ -d {r} ]; then tar -cf - {r}{bounded}; fi"


def archive_within(size: int, max_bytes: int | None) -> bool:
    """Whether an archive output_archive_command sent with ``max_bytes`` holds all it had."""
    return max_bytes is None or size <= max_bytes + ARCHIVE_OVERHEAD


def resume_unpack_command(folder: str, archive: str) -> str:
    """Unpack a checkpoint trialflow made and uploaded (``archive``, from the store, its files
    checked against their manifest) into ``folder`` for a restarted trial, whole or not at all
    (a second restarter finds it there); the archive goes either way."""
    q, a = shlex.quote(folder), shlex.quote(archive)
    partial = shlex.quote(f"{folder}.partial.") + '"$$"'
    return (
        f"trap {shlex.quote('rm -f ' + a)} EXIT; set -e; [ -d {q} ] && exit 0; "
        f"mkdir -p {partial}; tar --no-same-owner -xf {a} -C {partial}; mv {partial} {q}"
    )

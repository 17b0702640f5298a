"""Finding every process a trial started, even those that left its process group.

A trial can start processes that leave its session and process group
(``setsid sleep 600 &``, a double fork, ``subprocess.Popen(start_new_session=True)``)
and outlive a parent that ends: killing the process tree or the process group
misses them, and they keep a GPU or a port after the trial was cancelled. But
every process inherits its parent's environment, so each trial runs with a
mark (``TRIALFLOW_TRIAL_MARK``) that its descendants carry wherever they move;
stopping a trial stops every process that carries its mark (the approach of
Jenkins' process tree killer). The commands below are pure builders, run the
same way by the local platform and, over SSH, on remote machines (Linux: they
read ``/proc/<pid>/environ``; GNU or BusyBox grep).

What this cannot catch: a process that replaced its whole environment
(``env -i``, ``sudo``), or another user's. A cgroup would, but needs root or a
delegated hierarchy that Airflow workers rarely have.
"""

from __future__ import annotations

import hashlib
import shlex

MARK_VAR = "TRIALFLOW_TRIAL_MARK"


def trial_mark(trial_dir: str) -> str:
    """The mark of the trial whose folder is ``trial_dir`` (unique on its machine)."""
    return "t" + hashlib.sha256(str(trial_dir).encode()).hexdigest()[:24]


def _marked_function(mark: str) -> str:
    """``tf_marked``: prints the pids of the processes carrying ``mark``, except the shell
    running it and its subshells."""
    entry = shlex.quote(f"{MARK_VAR}={mark}")
    return (
        f"tf_marked() {{ set -- /proc/[0-9]*/environ; "
        f'for f in $(grep -lszxF -e {entry} -- "$@"); do p=${{f#/proc/}}; p=${{p%/environ}}; '
        '[ "$p" = "$$" ] || [ "$p" = "${BASHPID:-}" ] || echo "$p"; done; }; '
    )


def stop_trial_command(leader: int | None, pids: list[int], mark: str, grace_seconds: float) -> str:
    """A bash script that stops a trial for good: TERM to its process group (``leader`` leads
    it), to ``pids`` (its tree, children that left the group included) and to every process
    carrying ``mark``; then, once ``grace_seconds`` have passed and something is still alive
    (a trial that traps SIGTERM to save a checkpoint, or ignores it), KILL to all of them.

    It is meant to run in a session of its own, started by whoever asks for the stop, because
    the asker may not live through the grace: Airflow SIGKILLs a task 5 s after its SIGTERM,
    exactly when the trial's grace ends, so a task's on_kill that waited to send the KILL
    itself never sent it. Only integers above 1 are signalled (``kill -- -0`` or ``-1`` would
    reach every process of the account); zombies count as gone."""
    steps = max(1, int(grace_seconds * 10))
    group = int(leader) if leader is not None and int(leader) > 1 else 0
    tree = " ".join(str(int(p)) for p in pids if int(p) > 1)
    return (
        _marked_function(mark)
        + f"tf_tree='{tree}'; tf_pg={group}; "
        # alive and not a zombie (state is the field after the command's closing parenthesis)
        + "tf_up() { [ -r /proc/$1/stat ] || return 1; read -r s < /proc/$1/stat 2>/dev/null || return 1; "
        + 's=${s##*) }; [ "${s%% *}" != Z ]; }; '
        + 'tf_live() { for p in $tf_tree $(tf_marked); do tf_up "$p" && echo "$p"; done; }; '
        + '[ "$tf_pg" -gt 1 ] && kill -TERM -- -"$tf_pg" 2>/dev/null; '
        + 'tf_left=$(tf_live); [ -n "$tf_left" ] && kill -TERM $tf_left 2>/dev/null; '
        + f'tf_i=0; while [ -n "$tf_left" ] && [ $tf_i -lt {steps} ]; do sleep 0.1; tf_left=$(tf_live); '
        + "tf_i=$((tf_i+1)); done; "
        + 'if [ -n "$tf_left" ]; then [ "$tf_pg" -gt 1 ] && kill -KILL -- -"$tf_pg" 2>/dev/null; '
        + "kill -KILL $tf_left $(tf_marked) 2>/dev/null; fi; true"
    )


def stop_marked_command(mark: str, grace_seconds: float = 5.0) -> str:
    """A bash snippet that TERMs every process carrying ``mark``, then KILLs what is left after
    ``grace_seconds``. The shell that runs it (``$$``) and its subshells are spared: the
    trial's own wrapper runs it when the trial command has ended."""
    steps = max(1, int(grace_seconds * 10))
    return _marked_function(mark) + (
        'tf_left=$(tf_marked); if [ -n "$tf_left" ]; then kill -TERM $tf_left 2>/dev/null; tf_i=0; '
        f'while [ $tf_i -lt {steps} ]; do sleep 0.1; tf_left=$(tf_marked); [ -z "$tf_left" ] && break; '
        'tf_i=$((tf_i+1)); done; [ -n "$tf_left" ] && kill -KILL $tf_left 2>/dev/null; fi; true'
    )

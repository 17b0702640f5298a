"""RunWatchTrigger: the reconciler of one DAG run's trials, in the triggerer for the run's life.

Events do not always arrive: a trial task marked failed while it hands over from the worker to
the triggerer reaches no ``on_kill`` (measured), and its trial would run on with nothing
following it. This trigger compares, every ``poll_interval`` seconds (and at once when a trial trigger of the
run ends its task in this triggerer: trialflow.triggers.run_wakeups, or when the store says the
run's last trials ended: RunWatch.ask_early), what Airflow says of the
run's trial tasks with what the store says of their trials, and closes the gap through
trialflow.runs.reconcile (which decides; this only asks Airflow and the store), once a task has been
seen ended for reconcile.ON_KILL_GRACE seconds (its own on_kill usually acts first, and says
better what happened). It ends once every trial task of the run has ended and no trial of the
run is left running, so the end step that waits for it never summarizes a run with a trial
still running. When a person marks the run failed (or this task),
its ``on_kill`` makes the same pass at once, with the run taken as over when it is.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from airflow.triggers.base import BaseTrigger, TaskSuccessEvent, TriggerEvent

if TYPE_CHECKING:
    from trialflow.experiment import Experiment
    from trialflow.runs.reconcile import RunWatch
    from trialflow.store.experiment_store import ExperimentStore
    from trialflow.triggers.run_wakeups import RunWakeup

#: Stops under way (a reference keeps each alive until it ends: see on_kill).
_WATCHING: set[asyncio.Future[None]] = set()
#: Seconds a woken watch waits before it asks Airflow: the trial triggers of one wave of the run
#: end together, and one pass for them all is enough.
WOKEN_PAUSE = 0.05
#: Seconds in a row Airflow may not answer before the watch gives up (its task fails; the end
#: step's own pass remains).
ASK_GRACE = 600.0
#: The watch's polls leave Airflow at least this many times the last answer's time between two
#: asks: Airflow's answer is every trial task of the run, loaded whole by the triggerer's
#: supervisor (dill-unpickled executor configs included): at 1,000 tasks an answer took
#: 0.1-0.4 s, and 7 s while the run's 1,000 triggers were being made (bench/thousand.py).
ASK_SPACING = 10.0
#: ... but never more than this many seconds (an answer slowed by a busy start is not the norm).
LONGEST_POLL = 30.0


def poll_after(poll_interval: float, answer_took: float) -> float:
    """Seconds until the watch's next poll, after an answer that took ``answer_took``."""
    return max(poll_interval, min(ASK_SPACING * answer_took, LONGEST_POLL))


class RunWatchTrigger(BaseTrigger):
    """Reconcile the trials of run ``run_id`` with their tasks until every trial task has ended.

    :param config_path: the experiment's config (the platforms are rebuilt from it here).
    :param store_conn_id: the ``trialflow`` connection of the experiment store.
    :param experiment_id: the experiment the run drives.
    :param workdir: the experiment's working directory (where local trials live).
    :param dag_id: the DAG of the run.
    :param run_id: the run.
    :param trial_task_id: the mapped trial task whose instances follow the trials.
    :param poll_interval: seconds between two passes.
    """

    def __init__(
        self,
        *,
        config_path: str,
        store_conn_id: str,
        experiment_id: str,
        workdir: str,
        dag_id: str,
        run_id: str,
        trial_task_id: str = "trial",
        poll_interval: float = 2.0,
    ):
        super().__init__()
        self.config_path, self.store_conn_id = config_path, store_conn_id
        self.experiment_id, self.workdir = experiment_id, workdir
        self.dag_id, self.run_id, self.trial_task_id = dag_id, run_id, trial_task_id
        self.poll_interval = poll_interval

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "config_path": self.config_path,
                "store_conn_id": self.store_conn_id,
                "experiment_id": self.experiment_id,
                "workdir": self.workdir,
                "dag_id": self.dag_id,
                "run_id": self.run_id,
                "trial_task_id": self.trial_task_id,
                "poll_interval": self.poll_interval,
            },
        )

    def _open(self) -> tuple[Experiment, ExperimentStore]:
        from pathlib import Path

        from trialflow.config import load_config
        from trialflow.experiment import Experiment
        from trialflow.hooks.experiment_store import ExperimentStoreHook

        experiment = Experiment(load_config(self.config_path), self.experiment_id, Path(self.workdir))
        return experiment, ExperimentStoreHook(self.store_conn_id).get_conn()

    async def _states(self) -> dict[int, str | None]:
        from trialflow.from_airflow.why_stopped import ask_trial_states

        return await asyncio.to_thread(ask_trial_states, self.dag_id, self.run_id, self.trial_task_id)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from trialflow.hooks import airflow_connections
        from trialflow.runs.reconcile import RunWatch
        from trialflow.triggers import run_wakeups
        from trialflow.triggers.trial import listeners_present

        try:
            experiment, store = await asyncio.to_thread(self._open)
        except Exception as exc:
            yield TriggerEvent({"status": "ERROR", "message": f"cannot watch run {self.run_id}: {exc}"})
            return
        watch = RunWatch(experiment, store, self.run_id, airflow_connections())
        tracking = await _TrackingPasses.open(experiment, store, self.log)
        unanswered_since: float | None = None
        with run_wakeups.listening(self.dag_id, self.run_id, self.trial_task_id) as wakeup:
            while True:
                try:
                    asked_at = time.monotonic()
                    states = wakeup.merged(await self._states())
                    answer_took = time.monotonic() - asked_at
                    unanswered_since = None
                except Exception as exc:
                    now = time.monotonic()
                    unanswered_since = unanswered_since or now
                    if now - unanswered_since > ASK_GRACE:
                        message = f"Airflow did not say the trials' states: {exc}"
                        yield TriggerEvent({"status": "ERROR", "message": message})
                        return
                    await asyncio.sleep(max(self.poll_interval, 5.0))
                    continue
                tracking.maybe_pass()
                try:
                    if await watch.observe(states, time.monotonic()):
                        break
                except Exception:  # the store or a platform refused this time: the next pass tries again
                    self.log.exception("reconciling run %s failed; trying again", self.run_id)
                await self._pause(wakeup, watch, states, poll_after(self.poll_interval, answer_took))
        await tracking.settle()
        result: dict[str, Any] = {"status": "DONE", "reconciled": [t.trial_id for t in watch.reconciled]}
        # Ended from here (no worker start on the way to the end step), unless listeners must see it.
        yield TriggerEvent(result) if listeners_present() else TaskSuccessEvent(xcoms={"return_value": result})

    async def _pause(
        self, wakeup: RunWakeup, watch: RunWatch, states: dict[int, str | None], poll: float | None = None
    ) -> None:
        """Until the next pass: the poll, a trial trigger of the run ending the run's last task
        in this triggerer (RunWakeup.may_end_run), or the store saying the last wave's trials
        ended (RunWatch.ask_early decides; a trial that ends on its worker wakes no trigger)."""
        from trialflow.runs.reconcile import STORE_LOOK

        poll = self.poll_interval if poll is None else poll
        deadline = time.monotonic() + poll
        while (left := deadline - time.monotonic()) > 0:
            if await wakeup.wait(min(STORE_LOOK, left)) and wakeup.may_end_run(states):
                # a task a worker resumes ends a moment later: look again soon, not in a poll
                await asyncio.sleep(WOKEN_PAUSE)
                return
            try:
                if await watch.ask_early(states, time.monotonic(), poll):
                    return
            except Exception:  # the store busy this time: the poll remains
                self.log.debug("looking at run %s's trials in the store failed", self.run_id, exc_info=True)

    async def on_kill(self) -> None:
        """A person marked the run (or this task) failed or success, or cleared it: one pass now,
        the run taken as over when Airflow says it is failed or success. Shielded, as
        TrialTrigger.on_kill is: the triggerer cancels a killed trigger's task again."""
        work = asyncio.ensure_future(self._last_pass())
        _WATCHING.add(work)
        work.add_done_callback(_WATCHING.discard)
        await asyncio.shield(work)

    async def _last_pass(self) -> None:
        from trialflow.from_airflow.why_stopped import TRIGGER_ASK_TIMEOUT, state_text
        from trialflow.hooks import airflow_connections
        from trialflow.runs.reconcile import reconcile_run

        try:
            from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

            experiment, store = await asyncio.to_thread(self._open)
            run_state = state_text(
                await asyncio.wait_for(
                    asyncio.to_thread(RuntimeTaskInstance.get_dagrun_state, dag_id=self.dag_id, run_id=self.run_id),
                    TRIGGER_ASK_TIMEOUT,
                )
            )
            states = await asyncio.wait_for(self._states(), TRIGGER_ASK_TIMEOUT)
            done = await reconcile_run(
                experiment,
                store,
                self.run_id,
                states,
                run_over=run_state in ("failed", "success"),
                connections=airflow_connections(),
            )
            for trial in done:
                self.log.warning("Trial %s stopped: %s", trial.trial_id, trial.reason)
        except Exception:
            self.log.exception("could not reconcile run %s", self.run_id)


#: Seconds between two tracking passes of a run's watch (trialflow.tracking.sync), and how long
#: the watch waits for one under way when the run's trials have all ended (the end step makes
#: the last pass).
TRACKING_INTERVAL = 5.0
TRACKING_SETTLE = 10.0


class _TrackingPasses:
    """The run's MLflow logging while its watch runs: a pass every TRACKING_INTERVAL seconds in
    a thread beside the watch, never more than one at a time, so a tracking server that is slow
    or down delays only its own logging, never the reconciliation nor a trial."""

    def __init__(self, tracking: Any, links: Any, mask: Any, log: Any):
        self.tracking, self.links, self.mask, self.log = tracking, links, mask, log
        self.task: asyncio.Future[Any] | None = None
        self.last = 0.0
        #: Seconds from the last pass's start to the next's (trialflow.tracking.sync.pass_spacing).
        self.spacing = TRACKING_INTERVAL

    @classmethod
    async def open(cls, experiment: Experiment, store: ExperimentStore, log: Any) -> _TrackingPasses:
        if experiment.config.mlflow is None:
            return cls(None, None, None, log)
        from trialflow.from_airflow.secrets import masked_text
        from trialflow.hooks import airflow_connections
        from trialflow.tracking.runner import Tracking
        from trialflow.tracking.target import aresolve
        from trialflow.ui.links import tracking_links

        try:
            target = await aresolve(
                experiment.config.mlflow,
                experiment.config.experiment_name or experiment.experiment_id,
                airflow_connections(),
            )
            tracking = Tracking.open(store, experiment.experiment_id, None, target=target)
        except Exception as exc:  # not configured here, or the client missing: said, never fatal
            log.warning("experiment %s is not logged to MLflow: %s", experiment.experiment_id, exc)
            return cls(None, None, None, log)
        return cls(tracking, tracking_links(experiment.experiment_id), masked_text, log)

    def maybe_pass(self) -> None:
        if self.tracking is None or (self.task is not None and not self.task.done()):
            return
        # spaced by what a pass costs each time (pass_spacing): a long experiment's read of
        # every trial (0.21 s at 1,000 here) stays a tenth of the triggerer's time, and a server
        # that answers slowly is asked less often, not more
        if time.monotonic() - self.last < self.spacing:
            return
        self.last = time.monotonic()
        self.task = asyncio.ensure_future(asyncio.to_thread(self._pass))

    def _pass(self) -> None:
        from trialflow.tracking.sync import pass_spacing

        started = time.monotonic()
        report = None
        try:
            report = self.tracking.sync(self.links, self.mask, "RUNNING", budget=TRACKING_INTERVAL * 4)
        except Exception:  # the store busy, a bug: the next pass tries again
            self.log.exception("logging to MLflow failed; the next pass tries again")
            return
        finally:
            self.spacing = pass_spacing(report, time.monotonic() - started, TRACKING_INTERVAL)
        if report.error:
            self.log.warning("MLflow: %s (%d run(s) kept for later)", report.error, report.pending)

    async def settle(self) -> None:
        """Let a pass under way finish (bounded), so the end step's own pass is not turned away."""
        if self.task is not None and not self.task.done():
            try:
                await asyncio.wait_for(asyncio.shield(self.task), TRACKING_SETTLE)
            except TimeoutError:
                self.log.warning("an MLflow pass is still under way; the end step makes the last one")

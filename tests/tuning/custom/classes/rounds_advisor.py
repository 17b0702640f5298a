"""A customized advisor written only against NNI 3.0's documented API (``MsgDispatcherBase``,
``CommandType``, ``self.send``, ``nni.dump``/``nni.load``, ``MetricType``), as an NNI user wrote
one: it hands out parameters in rounds, a round only once every trial of the round before has
ended (as Hyperband's brackets wait), answering NoMoreTrialJobs meanwhile and sending the
owed trials from ``handle_trial_end``; it kills a trial whose intermediate result has dropped
``drops`` times in a row; it has no more trials after ``total``."""

import nni
from nni.runtime.msg_dispatcher_base import MsgDispatcherBase
from nni.runtime.tuner_command_channel import CommandType
from nni.utils import MetricType


class RoundsAdvisor(MsgDispatcherBase):
    def __init__(self, round_size=2, drops=None, total=100):
        super().__init__()
        self.total = total
        self.round_size = round_size
        self.drops = drops
        self.last = {}
        self.dropped = {}
        self.sent = 0
        self.ended = 0
        self.credit = 0
        self.results = {}
        self.calls = []
        self.imported = None

    def handle_initialize(self, data):
        self.space = data
        self.calls.append("initialize")
        self.send(CommandType.Initialized, "")

    def handle_update_search_space(self, data):
        self.space = data

    def handle_import_data(self, data):
        self.imported = data

    def _may_send(self):
        return self.sent < min(self.total, (self.ended // self.round_size + 1) * self.round_size)

    def _send_one(self):
        low, high = self.space["x"]["_value"]
        x = low + (high - low) * ((self.sent * 0.37) % 1)
        job = {"parameter_id": f"p{self.sent}", "parameters": {"x": x, "seen": len(self.results)}}
        self.send(CommandType.NewTrialJob, nni.dump({**job, "parameter_source": "algorithm"}))
        self.sent += 1

    def handle_request_trial_jobs(self, data):
        self.calls.append(f"request {data}")
        for _ in range(data):
            if self._may_send():
                self._send_one()
            else:
                self.credit += 1
                self.send(CommandType.NoMoreTrialJobs, nni.dump({"parameter_id": None}))

    def handle_report_metric_data(self, data):
        value = nni.load(data["value"])
        if data["type"] == MetricType.FINAL:
            self.results[data["parameter_id"]] = value
        elif data["type"] == MetricType.PERIODICAL and self.drops:
            trial = data["trial_job_id"]
            fell = trial in self.last and value < self.last[trial]
            self.dropped[trial] = self.dropped.get(trial, 0) + 1 if fell else 0
            self.last[trial] = value
            if self.dropped[trial] >= self.drops:
                self.send(CommandType.KillTrialJob, nni.dump(trial))

    def handle_trial_end(self, data):
        self.ended += 1
        sent = nni.load(data["hyper_params"])
        self.calls.append(f"end {sent['parameter_id']} {data['event']}")
        while self.credit and self._may_send():
            self.credit -= 1
            self._send_one()

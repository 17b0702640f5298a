"""A customized tuner written only against NNI's documented API (nni.tuner.Tuner, nni.utils):
it keeps everything it is told in memory, and says so in the parameters it generates."""

import random

from nni.tuner import Tuner
from nni.utils import OptimizeMode, extract_scalar_reward


class CountingTuner(Tuner):
    def __init__(self, optimize_mode="maximize", seed=0):
        self.mode = OptimizeMode(optimize_mode)
        self.rng = random.Random(seed)
        self.generated = []
        self.results = []
        self.ended = []
        self.imported = 0
        self.space = None

    def update_search_space(self, search_space):
        self.space = search_space

    def generate_parameters(self, parameter_id, **kwargs):
        self.generated.append(parameter_id)
        low, high = self.space["x"]["_value"]
        best = max((r for _, r in self.results), default=None)
        print("generating", parameter_id)  # a print must not disturb the answer
        return {
            "x": self.rng.uniform(low, high),
            "seen": len(self.results) if best is None else len(self.results),
        }

    def receive_trial_result(self, parameter_id, parameters, value, **kwargs):
        reward = extract_scalar_reward(value)
        self.results.append((parameter_id, reward if self.mode is OptimizeMode.Maximize else -reward))

    def trial_end(self, parameter_id, success, **kwargs):
        self.ended.append((parameter_id, success))

    def import_data(self, data):
        self.imported += len(data)
        for one in data:
            self.results.append((None, extract_scalar_reward(one["value"])))

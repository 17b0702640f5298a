"""Customized tuners that misbehave, each in one way."""

import os
import threading
import time

from nni.tuner import Tuner


class _Base(Tuner):
    def __init__(self, optimize_mode="maximize"):
        self.optimize_mode = optimize_mode

    def update_search_space(self, search_space):
        self.space = search_space

    def receive_trial_result(self, parameter_id, parameters, value, **kwargs):
        pass


class Raising(_Base):
    def generate_parameters(self, parameter_id, **kwargs):
        raise ValueError(f"no idea for trial {parameter_id}")


class Hanging(_Base):
    def generate_parameters(self, parameter_id, **kwargs):
        if os.fork() == 0:  # a child of its own, which must go with it
            time.sleep(3600)
        time.sleep(3600)


class Outside(_Base):
    def generate_parameters(self, parameter_id, **kwargs):
        return {"x": 99.0}


class Exiting(_Base):
    def generate_parameters(self, parameter_id, **kwargs):
        os._exit(3)


class Unpicklable(_Base):
    """Holds a lock: its object cannot be kept, so it is made anew and given the history."""

    def __init__(self, optimize_mode="maximize"):
        self.lock = threading.Lock()
        self.imported = 0

    def import_data(self, data):
        self.imported = len(data)

    def generate_parameters(self, parameter_id, **kwargs):
        return {"x": 0.5, "seen": self.imported}


class Peeking(_Base):
    """Reports which of the worker's secrets its process can see."""

    def generate_parameters(self, parameter_id, **kwargs):
        seen = sorted(k for k in os.environ if k.startswith("AIRFLOW_CONN_") or k.startswith("AIRFLOW__"))
        if seen:
            raise RuntimeError(f"saw {seen}")
        return {"x": 0.5, "seen": 0}

"""``nni.tuner.Tuner``, NNI's documented base class for a customized tuner, method for method
(only loaded where the real nni is absent: see ``nni``). trialflow calls a subclass as NNI's
dispatcher did (trialflow.tuning.custom): ``update_search_space`` once, ``generate_parameters``
for each trial, ``receive_trial_result`` with its final result, ``trial_end`` when it ends, and
``import_data`` with the earlier results when the class's saved state cannot be restored (NNI's
resume)."""

from typing import Any  # noqa: F401 (the type comments')

from .recoverable import Recoverable


class Tuner(Recoverable):
    def generate_parameters(self, parameter_id, **kwargs):  # type: (Any, Any) -> Any
        raise NotImplementedError("Tuner: generate_parameters not implemented")

    def generate_multiple_parameters(self, parameter_id_list, **kwargs):  # type: (list[Any], Any) -> list[Any]
        result = []  # type: list[Any]
        for parameter_id in parameter_id_list:
            try:
                result.append(self.generate_parameters(parameter_id, **kwargs))
            except Exception:  # NNI's NoMoreTrialError ends the list
                break
        return result

    def receive_trial_result(self, parameter_id, parameters, value, **kwargs):  # type: (Any, Any, Any, Any) -> None
        raise NotImplementedError("Tuner: receive_trial_result not implemented")

    def _accept_customized_trials(self, accept=True):  # type: (bool) -> None
        self._accept_customized = accept

    def receive_customized_trial_result(self, parameter_id, parameters, value, **kwargs):  # type: (Any, Any, Any, Any) -> None
        pass

    def trial_end(self, parameter_id, success, **kwargs):  # type: (Any, bool, Any) -> None
        pass

    def update_search_space(self, search_space):  # type: (dict[str, Any]) -> None
        raise NotImplementedError("Tuner: update_search_space not implemented")

    def import_data(self, data):  # type: (list[Any]) -> None
        pass

    def _on_exit(self):  # type: () -> None
        pass

    def _on_error(self):  # type: () -> None
        pass

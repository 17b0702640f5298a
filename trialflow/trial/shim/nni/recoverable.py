"""``nni.recoverable.Recoverable``: the base of NNI's Tuner and Assessor (only loaded where the
real nni is absent: see ``nni``). NNI's checkpoint hooks are kept as no-ops: trialflow keeps a
custom class's state itself (trialflow.tuning.custom)."""


class Recoverable:
    def load_checkpoint(self):  # type: () -> None
        pass

    def save_checkpoint(self):  # type: () -> None
        pass

    def get_checkpoint_path(self):  # type: () -> str | None
        return None

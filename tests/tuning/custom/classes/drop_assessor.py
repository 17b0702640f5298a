"""A customized assessor written only against NNI's documented API: a trial whose curve falls
twice in a row is bad; it remembers which trials ended."""

from nni.assessor import Assessor, AssessResult


class DropAssessor(Assessor):
    def __init__(self, patience=2):
        self.patience = patience
        self.ended = []

    def assess_trial(self, trial_job_id, trial_history):
        drops = 0
        for before, after in zip(trial_history, trial_history[1:]):
            drops = drops + 1 if after < before else 0
            if drops >= self.patience:
                return AssessResult.Bad
        return AssessResult.Good

    def trial_end(self, trial_job_id, success):
        self.ended.append((trial_job_id, success))


class BrokenAssessor(Assessor):
    def assess_trial(self, trial_job_id, trial_history):
        raise KeyError("curve")

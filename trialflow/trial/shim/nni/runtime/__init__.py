"""``nni.runtime``: only what a customized advisor imports (its base class and the command
names), for trialflow.tuning.custom. NNI's own runtime (its dispatcher loop, the channel to its
manager) is NNI's and is not here: trialflow calls the advisor's handlers itself."""

"""A tuner or assessor class of the user's own, written against NNI's API (NNI's "customized
tuner"), run unmodified: ``tuner: {className: my_tuner.MyTuner, codeDirectory: ., classArgs: ...}``.

host.py is the child process the class runs in; runner.py calls it from an ask or a judgement
and keeps the class's state in the experiment store."""

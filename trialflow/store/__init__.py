"""The experiment store: persistence alone, as Optuna's ``storages/`` is (the ExperimentStore,
the Optuna storage made cheap and its private API's one module, trialflow's tables, migrations
and schema version, the snapshot and the read paths, the trial queue, URLs, and the stored
shapes in :mod:`trialflow.store.records`). It imports no tuner: the tuners sit above it."""

"""Optuna's tables, as Optuna's own models declare them: the one way trialflow names them.

The store's storage, its plain-SQL trial reader, the tuners' history window, the snapshot cache
and the read models (trialflow.queries) all query the same rows. Declared once, by Optuna
(``optuna/storages/_rdb/models.py``, reached through optuna_internals.py with the rest of its
private parts), on Optuna's one MetaData, the one its migrations target; trialflow's own tables
are on trialflow's (tables.py). Column types are Optuna's: a trial's ``state`` reads as
``TrialState``, a direction as ``StudyDirection``, a value's type as Optuna's enum.
"""

from __future__ import annotations

from trialflow.store.optuna_internals import models

__all__ = [
    "DIRECTIONS",
    "INTERMEDIATE",
    "PARAMS",
    "STUDIES",
    "STUDY_ATTRS",
    "SYSTEM_ATTRS",
    "TRIALS",
    "TRIAL_ATTRS",
    "VALUES",
]

STUDIES = models.StudyModel.__table__
DIRECTIONS = models.StudyDirectionModel.__table__
STUDY_ATTRS = models.StudyUserAttributeModel.__table__
TRIALS = models.TrialModel.__table__
PARAMS = models.TrialParamModel.__table__
VALUES = models.TrialValueModel.__table__
TRIAL_ATTRS = models.TrialUserAttributeModel.__table__
SYSTEM_ATTRS = models.TrialSystemAttributeModel.__table__
INTERMEDIATE = models.TrialIntermediateValueModel.__table__

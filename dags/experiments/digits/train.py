"""An SVC on scikit-learn's bundled digits data (no download): a real, small NNI trial.

This is ordinary NNI trial code. It runs unchanged under NNI (`import nni`)
and under trialflow, which also ships the same API without dependencies.
"""

import os
import pickle

try:
    import nni
except ImportError:  # trialflow's dependency-free trial SDK speaks the same protocol
    from trialflow import trial as nni

from sklearn.datasets import load_digits
from sklearn.model_selection import cross_val_score
from sklearn.svm import SVC

params = {"C": 1.0, "gamma": 0.001, "kernel": "rbf"}
params.update(nni.get_next_parameter() or {})

X, y = load_digits(return_X_y=True)
model = SVC(C=params["C"], gamma=params["gamma"], kernel=params["kernel"])
scores = []
for score in cross_val_score(model, X, y, cv=3):
    scores.append(float(score))
    nni.report_intermediate_result(sum(scores) / len(scores))
# The model itself, trained on all the data, in the trial's artifacts folder (NNI_OUTPUT_DIR is
# the trial's output folder under NNI and trialflow alike): trialflow keeps it in the artifact
# store and names the best trial's on the experiment's Asset, so dags/digits_final_model.py
# promotes the model that won instead of training it again.
artifacts = os.path.join(os.environ.get("NNI_OUTPUT_DIR", "."), "artifacts")
os.makedirs(artifacts, exist_ok=True)
with open(os.path.join(artifacts, "model.pkl"), "wb") as out:
    pickle.dump(model.fit(X, y), out)
nni.report_final_result(sum(scores) / len(scores))

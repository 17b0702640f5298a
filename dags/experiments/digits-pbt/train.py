"""NNI's Population Based Training trial (examples/trials/mnist-pbt-tuner-pytorch/mnist.py) on
scikit-learn's bundled digits (no download): load the checkpoint PBTTuner names, train one step,
report, save. Ordinary NNI trial code: it runs unchanged under NNI and under trialflow.

The model is a linear classifier trained incrementally (``partial_fit``), so a checkpoint is
its pickled state and a trial that loads one goes on training it with its own parameters.
"""

import os
import pickle

try:
    import nni
except ImportError:  # trialflow's dependency-free trial SDK speaks the same protocol
    from trialflow import trial as nni

import numpy as np
from sklearn.datasets import load_digits
from sklearn.linear_model import SGDClassifier
from sklearn.model_selection import train_test_split


def get_params():
    return {"batch_size": 64, "eta0": 0.01, "alpha": 1e-4, "epochs": 2, "seed": 0}


def main(args):
    X, y = load_digits(return_X_y=True)
    X_train, X_test, y_train, y_test = train_test_split(X / 16.0, y, test_size=0.3, random_state=0)
    save_checkpoint_dir = args["save_checkpoint_dir"]
    save_checkpoint_path = os.path.join(save_checkpoint_dir, "model.pkl")
    load_checkpoint_path = os.path.join(args["load_checkpoint_dir"], "model.pkl")

    model = SGDClassifier(learning_rate="constant", random_state=args["seed"])
    if os.path.isfile(load_checkpoint_path):
        with open(load_checkpoint_path, "rb") as f:
            model = pickle.load(f)
    # The parameters of this step (a perturbed copy's, after an exploit) apply from here on.
    model.set_params(eta0=args["eta0"], alpha=args["alpha"])

    rng = np.random.default_rng(args["seed"])
    classes = np.unique(y)
    for epoch in range(1, args["epochs"] + 1):
        order = rng.permutation(len(X_train))
        for start in range(0, len(order), args["batch_size"]):
            batch = order[start : start + args["batch_size"]]
            model.partial_fit(X_train[batch], y_train[batch], classes=classes)
        test_acc = float(model.score(X_test, y_test))
        if epoch < args["epochs"]:
            nni.report_intermediate_result(test_acc)
        else:
            nni.report_final_result(test_acc)

    if not os.path.exists(save_checkpoint_dir):
        os.makedirs(save_checkpoint_dir)
    with open(save_checkpoint_path, "wb") as f:
        pickle.dump(model, f)


if __name__ == "__main__":
    params = get_params()
    params.update(nni.get_next_parameter())
    main(params)
